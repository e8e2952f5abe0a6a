// Package apiclient reads and watches networking.liqo.io kinds for the node agent, with
// restapi's REST client and informers alone: it runs on every node with a memory budget of
// 30 MiB, and controller-runtime's client and cache link client-go's scheme of every built-in
// Kubernetes kind, whose registration at start-up alone costs several MiB of heap and many
// pages of the binary. Here the scheme holds networking.liqo.io/v1alpha1 and nothing else;
// other writes (the agent's pod annotation) are raw JSON merge patches.
//
// Rules: no imports of sigs.k8s.io/controller-runtime, k8s.io/client-go/kubernetes or
// k8s.io/api (a test checks the package's dependencies).
package apiclient

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/kube/restapi"
)

// Client talks to the API server about networking.liqo.io/v1alpha1 objects.
type Client struct {
	rest *rest.RESTClient
}

// New returns a Client for cfg.
func New(cfg *rest.Config) (*Client, error) {
	s := runtime.NewScheme()
	if err := netv1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	rc, err := restapi.New(cfg, netv1alpha1.SchemeGroupVersion, s, restapi.JSON)
	if err != nil {
		return nil, err
	}
	return &Client{rest: rc}, nil
}

// Watch returns an informer of resource (plural, such as "configurations"), whose objects are
// of obj's type, calling changed after every add, update and delete. Start it with
// restapi.Start.
func (c *Client) Watch(resource string, obj runtime.Object, changed func()) (*restapi.Informer, error) {
	return restapi.NewInformer(c.rest, resource, obj, restapi.Watch{}, changed)
}

// WatchVTEPs is Watch of every InternalNode, keeping of each only its name and status.vtep:
// changed is called when the set of VTEPs (as vtepKey lists them) changes, not on every status
// write of every node.
func (c *Client) WatchVTEPs(changed func()) (*restapi.Informer, error) {
	var mu sync.Mutex
	last := ""
	var inf *restapi.Informer
	inf, err := restapi.NewInformer(c.rest, "internalnodes", &netv1alpha1.InternalNode{}, restapi.Watch{Transform: keepVTEP}, func() {
		key := vtepKey(restapi.List[netv1alpha1.InternalNode](inf))
		mu.Lock()
		moved := key != last
		last = key
		mu.Unlock()
		if moved {
			changed()
		}
	})
	return inf, err
}

// keepVTEP trims a cached InternalNode to its name and VTEP.
func keepVTEP(obj any) (any, error) {
	in, ok := obj.(*netv1alpha1.InternalNode)
	if !ok {
		return obj, nil // a tombstone
	}
	out := &netv1alpha1.InternalNode{}
	out.Name, out.ResourceVersion = in.Name, in.ResourceVersion
	if in.Status.VTEP != nil {
		v := *in.Status.VTEP
		out.Status.VTEP = &v
	}
	return out, nil
}

// vtepKey lists the VTEP addresses of nodes, sorted.
func vtepKey(nodes []*netv1alpha1.InternalNode) string {
	var ips []string
	for _, n := range nodes {
		if n.Status.VTEP != nil {
			ips = append(ips, string(n.Status.VTEP.IP))
		}
	}
	slices.Sort(ips)
	return strings.Join(ips, ",")
}

// WatchNamed is Watch of the one cluster-scoped object called name (a field selector on
// metadata.name): its changes only call changed.
func (c *Client) WatchNamed(resource, name string, obj runtime.Object, changed func()) (*restapi.Informer, error) {
	return restapi.NewInformer(c.rest, resource, obj, restapi.Watch{Fields: fields.OneTermEqualSelector("metadata.name", name)}, changed)
}

// PatchStatus applies a JSON merge patch to the status of a cluster-scoped object.
func (c *Client) PatchStatus(ctx context.Context, resource, name string, patch []byte) error {
	return c.rest.Patch(types.MergePatchType).Resource(resource).Name(name).SubResource("status").
		Body(patch).Timeout(30 * time.Second).Do(ctx).Error()
}

// PatchPod applies a JSON merge patch to a Pod (core/v1), without core/v1's types.
func (c *Client) PatchPod(ctx context.Context, namespace, name string, patch []byte) error {
	return c.rest.Patch(types.MergePatchType).AbsPath("/api/v1/namespaces", namespace, "pods", name).
		Body(patch).Timeout(30 * time.Second).Do(ctx).Error()
}

// OwnerGone reports whether the DaemonSet that owns pod namespace/name is gone or being
// deleted (helm uninstall, kubectl delete daemonset), and says how it knows: then the agent's
// node state is to go too. Credentials refused (the release's ServiceAccount or RBAC already
// deleted, which helm does right after the DaemonSet) count as gone. A pod without a
// DaemonSet owner (run by hand) reports false.
func (c *Client) OwnerGone(ctx context.Context, namespace, name string) (bool, string, error) {
	revoked := func(err error) bool { return apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) }
	var pod struct {
		Metadata struct {
			OwnerReferences []struct {
				Kind, Name string
			} `json:"ownerReferences"`
		} `json:"metadata"`
	}
	raw, err := c.rest.Get().AbsPath("/api/v1/namespaces", namespace, "pods", name).Timeout(10 * time.Second).DoRaw(ctx)
	if revoked(err) {
		return true, "the agent's credentials were revoked", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("pod %s/%s: %w", namespace, name, err)
	}
	if err := json.Unmarshal(raw, &pod); err != nil {
		return false, "", err
	}
	for _, o := range pod.Metadata.OwnerReferences {
		if o.Kind != "DaemonSet" {
			continue
		}
		var ds struct {
			Metadata struct {
				DeletionTimestamp *string `json:"deletionTimestamp"`
			} `json:"metadata"`
		}
		raw, err := c.rest.Get().AbsPath("/apis/apps/v1/namespaces", namespace, "daemonsets", o.Name).Timeout(10 * time.Second).DoRaw(ctx)
		switch {
		case apierrors.IsNotFound(err):
			return true, "DaemonSet " + o.Name + " is gone", nil
		case revoked(err):
			return true, "the agent's credentials were revoked", nil
		case err != nil:
			return false, "", fmt.Errorf("daemonset %s/%s: %w", namespace, o.Name, err)
		}
		if err := json.Unmarshal(raw, &ds); err != nil {
			return false, "", err
		}
		if ds.Metadata.DeletionTimestamp != nil {
			return true, "DaemonSet " + o.Name + " is being deleted", nil
		}
		return false, "", nil
	}
	return false, "", nil
}
