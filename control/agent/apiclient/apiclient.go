// Package apiclient reads and watches networking.liqo.io kinds with client-go's REST client and
// informers alone, for the node agent: it runs on every node with a memory budget of 30 MiB,
// and controller-runtime's client and cache link client-go's scheme of every built-in
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
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
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
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &netv1alpha1.SchemeGroupVersion
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = serializer.NewCodecFactory(s).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("REST client for %s: %w", netv1alpha1.SchemeGroupVersion, err)
	}
	return &Client{rest: rc}, nil
}

// Informer is a watch cache of one kind, all namespaces.
type Informer struct {
	inf cache.SharedIndexInformer
}

// Watch returns an informer of resource (plural, such as "configurations"), whose objects are
// of obj's type, calling changed after every add, update and delete. Start it with Start.
func (c *Client) Watch(resource string, obj runtime.Object, changed func()) (*Informer, error) {
	return c.watch(resource, fields.Everything(), obj, changed)
}

// WatchNamed is Watch of the one cluster-scoped object called name (a field selector on
// metadata.name): its changes only call changed.
func (c *Client) WatchNamed(resource, name string, obj runtime.Object, changed func()) (*Informer, error) {
	return c.watch(resource, fields.OneTermEqualSelector("metadata.name", name), obj, changed)
}

func (c *Client) watch(resource string, sel fields.Selector, obj runtime.Object, changed func()) (*Informer, error) {
	lw := cache.NewListWatchFromClient(c.rest, resource, metav1.NamespaceAll, sel)
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	})
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", resource, err)
	}
	return &Informer{inf: inf}, nil
}

// Start runs the informers until ctx ends and waits for all of them to list once.
func Start(ctx context.Context, infs ...*Informer) error {
	synced := make([]cache.InformerSynced, len(infs))
	for i, in := range infs {
		go in.inf.RunWithContext(ctx)
		synced[i] = in.inf.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("watch caches did not fill: %w", ctx.Err())
	}
	return nil
}

// List returns the cached objects of the informer, as T (the type given to Watch). The
// objects are the cache's own: callers must not modify them.
func List[T any](in *Informer) []*T {
	items := in.inf.GetStore().List()
	out := make([]*T, 0, len(items))
	for _, it := range items {
		if t, ok := it.(*T); ok {
			out = append(out, t)
		}
	}
	return out
}

// Get returns the cached object named name (cluster-scoped kinds) or namespace/name, or nil.
func Get[T any](in *Informer, key string) *T {
	it, ok, err := in.inf.GetStore().GetByKey(key)
	if err != nil || !ok {
		return nil
	}
	t, _ := it.(*T)
	return t
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
