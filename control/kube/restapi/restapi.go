// Package restapi reads and watches the API with client-go's REST client and informers alone,
// for the daemons with a memory budget (the node agent, the gateway): controller-runtime's
// client and cache and client-go's typed clientset link client-go's scheme of every built-in
// Kubernetes kind, whose registration at start-up costs megabytes of heap, and whose types and
// code the garbage collector and every scrape then fault back into the process (see
// appliance/memory.go). Here a caller builds a scheme of only the kinds it reads and a REST
// client per group version.
//
// Rules: no imports of sigs.k8s.io/controller-runtime, k8s.io/client-go/kubernetes or
// k8s.io/api (a test checks the package's dependencies). Objects handed out by an Informer are
// the cache's own: callers must not modify them.
package restapi

import (
	"context"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Content types of New: JSON, or protobuf (less work and garbage to decode for large lists,
// built-in kinds only: custom resources are served as JSON).
const (
	JSON     = runtime.ContentTypeJSON
	Protobuf = runtime.ContentTypeProtobuf
)

// New returns a REST client for the group version gv ("" group: the core API under /api),
// decoding with s, which must hold the kinds read through it (and metav1's, AddToGroupVersion).
// It has an HTTP client of its own; NewShared lets several share one.
func New(cfg *rest.Config, gv schema.GroupVersion, s *runtime.Scheme, contentType string) (*rest.RESTClient, error) {
	return NewShared(cfg, nil, gv, s, contentType)
}

// HTTPClient returns the HTTP client (its transport, its connections) that NewShared's clients
// of cfg may share: one connection to the API server instead of one per group version.
func HTTPClient(cfg *rest.Config) (*http.Client, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("HTTP client for the API server: %w", err)
	}
	return hc, nil
}

// NewShared is New over hc (from HTTPClient of the same cfg; nil: a client of its own).
func NewShared(cfg *rest.Config, hc *http.Client, gv schema.GroupVersion, s *runtime.Scheme, contentType string) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	if gv.Group == "" {
		c.APIPath = "/api"
	}
	c.ContentType = contentType
	c.AcceptContentTypes = contentType
	if contentType != JSON {
		c.AcceptContentTypes = contentType + "," + JSON
	}
	c.NegotiatedSerializer = serializer.NewCodecFactory(s).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	var rc *rest.RESTClient
	var err error
	if hc != nil {
		rc, err = rest.RESTClientForConfigAndClient(c, hc)
	} else {
		rc, err = rest.RESTClientFor(c)
	}
	if err != nil {
		return nil, fmt.Errorf("REST client for %s: %w", gv, err)
	}
	return rc, nil
}

// Informer is a watch cache of one kind.
type Informer struct {
	inf cache.SharedIndexInformer
}

// Watch says what an informer watches besides its kind.
type Watch struct {
	// Namespace: "" for all namespaces (and cluster-scoped kinds).
	Namespace string
	// Fields selects objects by field (nil: every object).
	Fields fields.Selector
	// Transform, if set, replaces each object before it is cached (to keep less of it).
	Transform cache.TransformFunc
}

// NewInformer returns an informer of resource (plural, such as "configurations") through rc,
// whose objects are of obj's type, calling changed after every add, update and delete. Start
// it with Start.
func NewInformer(rc rest.Interface, resource string, obj runtime.Object, w Watch, changed func()) (*Informer, error) {
	sel := w.Fields
	if sel == nil {
		sel = fields.Everything()
	}
	ns := w.Namespace
	if ns == "" {
		ns = metav1.NamespaceAll
	}
	lw := cache.NewListWatchFromClient(rc, resource, ns, sel)
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
	if w.Transform != nil {
		if err := inf.SetTransform(w.Transform); err != nil {
			return nil, fmt.Errorf("watch %s: %w", resource, err)
		}
	}
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

// List returns the cached objects of the informer, as T (the type given to NewInformer). The
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
// The object is the cache's own: callers must not modify it.
func Get[T any](in *Informer, key string) *T {
	it, ok, err := in.inf.GetStore().GetByKey(key)
	if err != nil || !ok {
		return nil
	}
	t, _ := it.(*T)
	return t
}
