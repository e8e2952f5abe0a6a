package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// PodAddr is what a gateway keeps of a pod for its /32 and /128 routes (Options.WatchPods):
// the node it runs on and its IPv4 and IPv6 addresses (either may be zero).
type PodAddr struct {
	Node    string
	IP, IP6 netip.Addr
}

// PodAddrOf reduces a Pod to its PodAddr: its first IPv4 and first IPv6 address. ok is false
// for a pod the gateway routes nothing to: one on the host network (its addresses are its
// node's), one not scheduled or without an address yet, and one that has finished (Succeeded
// or Failed: its addresses are free and may already belong to a new pod on another node).
func PodAddrOf(p *corev1.Pod) (a PodAddr, ok bool) {
	if p.Spec.HostNetwork || p.Spec.NodeName == "" ||
		p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return PodAddr{}, false
	}
	ips := p.Status.PodIPs
	if len(ips) == 0 && p.Status.PodIP != "" {
		ips = []corev1.PodIP{{IP: p.Status.PodIP}}
	}
	for _, s := range ips {
		ip, err := netip.ParseAddr(s.IP)
		switch {
		case err != nil || ip.Zone() != "":
		case ip.Is4() && !a.IP.IsValid():
			a.IP = ip
		case ip.Is6() && !ip.Is4In6() && !a.IP6.IsValid():
			a.IP6 = ip
		}
	}
	if !a.IP.IsValid() && !a.IP6.IsValid() {
		return PodAddr{}, false
	}
	a.Node = p.Spec.NodeName
	return a, true
}

// podAPI is the part of client-go's typed Pods client the pod watch uses.
type podAPI interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// podWatch keeps the PodAddr of every pod of the cluster. It lists in pages and watches from
// the list's resourceVersion, reducing each Pod to its PodAddr as it arrives, so that neither
// whole Pods nor a whole list are ever held: an informer's cache, even of Pods slimmed by a
// transform, held about 1.7 KB per pod (240 MiB at the 150,000 pods of the Kubernetes
// scalability limits) and copied every Pod on each List; this holds about 100 bytes per pod
// (BenchmarkPodWatchMemory) and hands out a slice of PodAddrs.
//
// It keeps what it has while the API server cannot be reached, relists when its
// resourceVersion has expired, and calls changed only when a pod's PodAddr appeared, changed or
// went (a pod's conditions or labels changing is none of the gateway's business).
type podWatch struct {
	api      podAPI
	changed  func()
	log      *slog.Logger
	pageSize int64         // list page size (default 500)
	backoff  time.Duration // first wait after a failure (default 1 s; doubles up to 30 s)

	mu     sync.Mutex
	byKey  map[string]PodAddr // namespace/name -> PodAddr
	nodes  map[string]string  // interned node names
	synced chan struct{}      // closed after the first complete list
}

func newPodWatch(api podAPI, changed func(), log *slog.Logger) *podWatch {
	return &podWatch{api: api, changed: changed, log: log, pageSize: 500, backoff: time.Second,
		byKey: map[string]PodAddr{}, nodes: map[string]string{}, synced: make(chan struct{})}
}

// errExpired: the resourceVersion being watched from is too old; relist.
var errExpired = errors.New("resource version expired")

// run lists and watches until ctx ends.
func (p *podWatch) run(ctx context.Context) {
	rv := ""
	wait := p.backoff
	failing := false
	for ctx.Err() == nil {
		var err error
		if rv == "" {
			rv, err = p.list(ctx)
		} else {
			rv, err = p.watch(ctx, rv)
		}
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errExpired):
			rv = "" // relist at once
			continue
		case err != nil:
			if !failing {
				p.log.Warn("cannot watch Pods; keeping the pod routes as they are and retrying", "err", err)
				failing = true
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait/2 + rand.N(wait/2+1)):
			}
			wait = min(2*wait, 30*time.Second)
			continue
		}
		if failing {
			p.log.Info("watching Pods again")
			failing = false
		}
		wait = p.backoff
	}
}

// list reads every pod, page by page, replaces what is kept and returns the list's
// resourceVersion.
func (p *podWatch) list(ctx context.Context) (string, error) {
	p.mu.Lock()
	fresh := make(map[string]PodAddr, len(p.byKey))
	p.mu.Unlock()
	nodes := map[string]string{}
	opts := metav1.ListOptions{Limit: p.pageSize}
	for {
		l, err := p.api.List(ctx, opts)
		if err != nil {
			if opts.Continue != "" && (apierrors.IsResourceExpired(err) || apierrors.IsGone(err)) {
				// The continue token expired between pages: start again from the first.
				opts.Continue = ""
				clear(fresh)
				clear(nodes)
				continue
			}
			return "", fmt.Errorf("list Pods: %w", err)
		}
		for i := range l.Items {
			if a, ok := PodAddrOf(&l.Items[i]); ok {
				a.Node = intern(nodes, a.Node)
				fresh[l.Items[i].Namespace+"/"+l.Items[i].Name] = a
			}
		}
		if l.Continue == "" {
			p.replace(fresh, nodes)
			return l.ResourceVersion, nil
		}
		opts.Continue = l.Continue
	}
}

func intern(m map[string]string, s string) string {
	if v, ok := m[s]; ok {
		return v
	}
	m[s] = s
	return s
}

func (p *podWatch) replace(fresh map[string]PodAddr, nodes map[string]string) {
	p.mu.Lock()
	same := len(fresh) == len(p.byKey)
	if same {
		for k, a := range fresh {
			if b, ok := p.byKey[k]; !ok || a != b {
				same = false
				break
			}
		}
	}
	p.byKey, p.nodes = fresh, nodes
	first := false
	select {
	case <-p.synced:
	default:
		close(p.synced)
		first = true
	}
	p.mu.Unlock()
	if !same || first {
		p.changed()
	}
}

// watch follows changes from rv until the watch ends (the server closes it after its timeout)
// and returns the last resourceVersion seen.
func (p *podWatch) watch(ctx context.Context, rv string) (string, error) {
	timeout := int64(300 + rand.N(300)) // as a reflector does: 5-10 minutes, spread out
	w, err := p.api.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
	if err != nil {
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return rv, errExpired
		}
		return rv, fmt.Errorf("watch Pods: %w", err)
	}
	defer w.Stop()
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return rv, nil
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return rv, nil
		}
		switch ev.Type {
		case watch.Error:
			err := apierrors.FromObject(ev.Object)
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return rv, errExpired
			}
			return rv, fmt.Errorf("watch Pods: %w", err)
		case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				return rv, fmt.Errorf("watch Pods: a %T in a %s event", ev.Object, ev.Type)
			}
			rv = pod.ResourceVersion
			if ev.Type != watch.Bookmark {
				p.update(pod, ev.Type == watch.Deleted)
			}
		}
	}
}

// update keeps pod's PodAddr (or forgets it when the pod is gone or routes nothing) and calls
// changed when that changes anything.
func (p *podWatch) update(pod *corev1.Pod, deleted bool) {
	key := pod.Namespace + "/" + pod.Name
	a, ok := PodAddrOf(pod)
	p.mu.Lock()
	old, had := p.byKey[key]
	switch {
	case ok && !deleted:
		if had && old == a {
			p.mu.Unlock()
			return
		}
		a.Node = intern(p.nodes, a.Node)
		p.byKey[key] = a
	case had:
		delete(p.byKey, key)
	default:
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.changed()
}

// appendTo appends every kept PodAddr to dst (in no particular order).
func (p *podWatch) appendTo(dst []PodAddr) []PodAddr {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.byKey {
		dst = append(dst, a)
	}
	return dst
}

// waitSynced waits for the first complete list.
func (p *podWatch) waitSynced(ctx context.Context) error {
	select {
	case <-p.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pods did not sync: %w", ctx.Err())
	}
}
