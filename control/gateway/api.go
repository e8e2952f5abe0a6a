package gateway

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/kube/restapi"
)

// The gateway reads the API through restapi's REST clients and informers, with a scheme of
// networking.liqo.io/v1alpha1 and, of the built-in kinds, only those it reads: Secret, Node
// and Pod (core/v1) and Lease (coordination.k8s.io/v1). controller-runtime and client-go's
// typed clientset would register every built-in kind at start-up, which with the Prometheus
// client library was a quarter of an idle gateway's memory (BenchmarkIdleRSS: 19.3 MiB with
// them; a hub runs a gateway per peer).

// scheme returns the gateway's scheme.
func scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := netv1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	s.AddKnownTypes(corev1.SchemeGroupVersion, &corev1.Secret{}, &corev1.SecretList{}, &corev1.Node{}, &corev1.NodeList{},
		&corev1.Pod{}, &corev1.PodList{})
	metav1.AddToGroupVersion(s, corev1.SchemeGroupVersion)
	s.AddKnownTypes(coordinationv1.SchemeGroupVersion, &coordinationv1.Lease{}, &coordinationv1.LeaseList{})
	metav1.AddToGroupVersion(s, coordinationv1.SchemeGroupVersion)
	return s, nil
}

// clients are the gateway's REST clients, one per group version, over one HTTP client (one
// connection to the API server, as the typed clientset had).
type clients struct {
	net   *rest.RESTClient // networking.liqo.io/v1alpha1
	core  *rest.RESTClient // core/v1, JSON
	coord *rest.RESTClient // coordination.k8s.io/v1
}

func newClients(cfg *rest.Config) (*clients, error) {
	s, err := scheme()
	if err != nil {
		return nil, err
	}
	hc, err := restapi.HTTPClient(cfg)
	if err != nil {
		return nil, err
	}
	var c clients
	if c.net, err = restapi.NewShared(cfg, hc, netv1alpha1.SchemeGroupVersion, s, restapi.JSON); err != nil {
		return nil, err
	}
	if c.core, err = restapi.NewShared(cfg, hc, corev1.SchemeGroupVersion, s, restapi.JSON); err != nil {
		return nil, err
	}
	if c.coord, err = restapi.NewShared(cfg, hc, coordinationv1.SchemeGroupVersion, s, restapi.JSON); err != nil {
		return nil, err
	}
	return &c, nil
}

// podsClient lists and watches Pods of every namespace as protobuf, which the API server
// encodes and the gateway decodes with less work and garbage than JSON (a cluster's every Pod
// on each relist). It is the podAPI of the pod watch.
type podsClient struct{ rc *rest.RESTClient }

func newPodsClient(cfg *rest.Config) (podsClient, error) {
	s, err := scheme()
	if err != nil {
		return podsClient{}, err
	}
	rc, err := restapi.New(cfg, corev1.SchemeGroupVersion, s, restapi.Protobuf)
	return podsClient{rc}, err
}

func (p podsClient) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	l := &corev1.PodList{}
	err := p.rc.Get().Resource("pods").VersionedParams(&opts, metav1.ParameterCodec).Timeout(time.Minute).Do(ctx).Into(l)
	return l, err
}

func (p podsClient) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	r := p.rc.Get().Resource("pods").VersionedParams(&opts, metav1.ParameterCodec)
	if opts.TimeoutSeconds != nil {
		r = r.Timeout(time.Duration(*opts.TimeoutSeconds) * time.Second)
	}
	return r.Watch(ctx)
}

// leasesClient reads and writes the Leases of one namespace (the elector's).
type leasesClient struct {
	rc        rest.Interface
	namespace string
}

func (l leasesClient) Get(ctx context.Context, name string, _ metav1.GetOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := l.rc.Get().Namespace(l.namespace).Resource("leases").Name(name).Do(ctx).Into(out)
	return out, err
}

func (l leasesClient) Create(ctx context.Context, lease *coordinationv1.Lease, _ metav1.CreateOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := l.rc.Post().Namespace(l.namespace).Resource("leases").Body(lease).Do(ctx).Into(out)
	return out, err
}

func (l leasesClient) Update(ctx context.Context, lease *coordinationv1.Lease, _ metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := l.rc.Put().Namespace(l.namespace).Resource("leases").Name(lease.Name).Body(lease).Do(ctx).Into(out)
	return out, err
}

// podGetter reads the Pods of one namespace (the elector's).
type podGetter struct {
	rc        rest.Interface
	namespace string
}

func (p podGetter) Get(ctx context.Context, name string, _ metav1.GetOptions) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := p.rc.Get().Namespace(p.namespace).Resource("pods").Name(name).Do(ctx).Into(out)
	return out, err
}

// mergePatch applies a JSON merge patch to namespace/name of resource through rc (subresource
// "" for the object itself, or "status").
func mergePatch(ctx context.Context, rc rest.Interface, namespace, resource, name, subresource string, patch []byte) error {
	r := rc.Patch(types.MergePatchType).Namespace(namespace).Resource(resource).Name(name)
	if subresource != "" {
		r = r.SubResource(subresource)
	}
	return r.Body(patch).Timeout(30 * time.Second).Do(ctx).Error()
}
