package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/skein-net/skein/internal/apitest"
)

// fakePods serves scripted lists and hands out watches the test drives.
type fakePods struct {
	mu       sync.Mutex
	lists    []func(opts metav1.ListOptions) (*corev1.PodList, error) // one per List call, in order
	listOpts []metav1.ListOptions
	watchRVs []string
	watches  chan *watch.FakeWatcher
}

func (f *fakePods) List(_ context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listOpts = append(f.listOpts, opts)
	if len(f.lists) == 0 {
		return nil, errors.New("no list scripted")
	}
	l := f.lists[0]
	f.lists = f.lists[1:]
	return l(opts)
}

func (f *fakePods) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	f.mu.Lock()
	f.watchRVs = append(f.watchRVs, opts.ResourceVersion)
	f.mu.Unlock()
	if !opts.AllowWatchBookmarks || opts.TimeoutSeconds == nil {
		return nil, fmt.Errorf("watch without bookmarks or timeout: %+v", opts)
	}
	select {
	case w := <-f.watches:
		return w, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func testPod(name, node, ip string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", ResourceVersion: "1"},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}}
}

func page(rv, cont string, pods ...corev1.Pod) func(metav1.ListOptions) (*corev1.PodList, error) {
	return func(metav1.ListOptions) (*corev1.PodList, error) {
		return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: rv, Continue: cont}, Items: pods}, nil
	}
}

func failing(err error) func(metav1.ListOptions) (*corev1.PodList, error) {
	return func(metav1.ListOptions) (*corev1.PodList, error) { return nil, err }
}

var expired = apierrors.NewResourceExpired("too old resource version")

// kept is the watch's pods as "node=ip" strings, sorted.
func kept(p *podWatch) []string {
	var out []string
	for _, a := range p.appendTo(nil) {
		out = append(out, a.Node+"="+a.IP.String())
	}
	slices.Sort(out)
	return out
}

// TestPodWatch drives the pod watch through what an API server does: a failed list, a list in
// pages, watch events that change a route and events that do not, a bookmark, a watch the
// server closes, an expired resourceVersion (relist, also when a continue token expires between
// pages), and an error event.
func TestPodWatch(t *testing.T) {
	f := &fakePods{watches: make(chan *watch.FakeWatcher)}
	host := testPod("host", "n1", "192.168.0.1")
	host.Spec.HostNetwork = true
	f.lists = []func(metav1.ListOptions) (*corev1.PodList, error){
		failing(errors.New("connection refused")),
		page("", "c1", testPod("a", "n1", "10.0.0.1"), testPod("b", "n2", "10.0.0.2")),
		page("10", "", testPod("c", "n2", "10.0.0.3"), host),
	}
	var changes atomic.Int64
	p := newPodWatch(f, func() { changes.Add(1) }, slog.New(slog.DiscardHandler))
	p.pageSize, p.backoff = 2, time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	if err := p.waitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := kept(p), []string{"n1=10.0.0.1", "n2=10.0.0.2", "n2=10.0.0.3"}; !slices.Equal(got, want) {
		t.Errorf("after the list: %v, want %v", got, want)
	}
	if f.listOpts[1].Limit != 2 || f.listOpts[2].Continue != "c1" || f.listOpts[1].ResourceVersion != "" {
		t.Errorf("list options %+v: want pages of 2, the second from the first's continue token, a consistent read", f.listOpts)
	}
	if n := changes.Load(); n != 1 {
		t.Errorf("%d changes after the first list, want 1", n)
	}

	w := watch.NewFake()
	f.watches <- w
	mod := testPod("a", "n1", "10.0.0.1")
	mod.ResourceVersion, mod.Labels = "11", map[string]string{"new": "label"}
	w.Modify(&mod) // nothing the gateway routes by
	moved := testPod("a", "n3", "10.0.0.1")
	moved.ResourceVersion = "12"
	w.Modify(&moved)
	w.Add(ptr.To(testPod("d", "n3", "10.0.0.4")))
	w.Delete(ptr.To(testPod("b", "n2", "10.0.0.2")))
	done1 := testPod("c", "n2", "10.0.0.3")
	done1.Status.Phase = corev1.PodSucceeded // its address is free now
	w.Modify(&done1)
	w.Delete(ptr.To(testPod("never-seen", "n1", "")))
	w.Action(watch.Bookmark, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "20"}})
	apitest.Eventually(t, "the events", 10*time.Second, func() bool { return len(kept(p)) == 2 })
	if got, want := kept(p), []string{"n3=10.0.0.1", "n3=10.0.0.4"}; !slices.Equal(got, want) {
		t.Errorf("after the events: %v, want %v", got, want)
	}
	if n := changes.Load(); n != 5 {
		t.Errorf("%d changes, want 5: the first list, a moved, d added, b deleted, c finished", n)
	}

	// The server ends the watch: it resumes from the bookmark.
	w.Stop()
	w2 := watch.NewFake()
	f.watches <- w2
	// The resourceVersion has expired: relist, where the continue token expires once.
	f.mu.Lock()
	f.lists = append(f.lists,
		page("", "c2", testPod("x", "n1", "10.0.0.9")),
		failing(expired),
		page("", "c3", testPod("y", "n1", "10.0.0.8")),
		page("30", "", testPod("z", "n2", "10.0.0.7")))
	f.mu.Unlock()
	w2.Error(&expired.ErrStatus)
	w3 := watch.NewFake()
	f.watches <- w3
	if got, want := kept(p), []string{"n1=10.0.0.8", "n2=10.0.0.7"}; !slices.Equal(got, want) {
		t.Errorf("after the relist: %v, want %v (x was listed before the continue token expired)", got, want)
	}
	f.mu.Lock()
	rvs := slices.Clone(f.watchRVs)
	f.mu.Unlock()
	if want := []string{"10", "20", "30"}; !slices.Equal(rvs, want) {
		t.Errorf("watched from %v, want %v", rvs, want)
	}

	// Any other error event: the watch starts again from where it was, after a pause.
	w3.Error(&apierrors.NewInternalError(errors.New("etcd leader changed")).ErrStatus)
	w4 := watch.NewFake()
	f.watches <- w4
	f.mu.Lock()
	rvs = slices.Clone(f.watchRVs)
	f.mu.Unlock()
	if rvs[len(rvs)-1] != "30" {
		t.Errorf("after an error event, watched from %v, want 30", rvs)
	}
	if got := kept(p); len(got) != 2 {
		t.Errorf("an error lost the routes: %v", got)
	}
	// An object of another kind in an event is refused, not trusted.
	w4.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	w5 := watch.NewFake()
	f.watches <- w5
	if got := kept(p); len(got) != 2 {
		t.Errorf("a Node event changed the routes: %v", got)
	}
}

// TestPodWatchAPIServer runs the pod watch against a real API server, protobuf as the gateway
// speaks it, with pages of two: it lists what exists, follows pods created, given an address,
// finished and deleted, and reports no change for a change it does not route by.
func TestPodWatchAPIServer(t *testing.T) {
	env := apitest.Start(t)
	ns := env.Namespace(t, "podwatch")
	ctx := context.Background()
	cfg := rest.CopyConfig(env.Config)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cs, err := kubernetes.NewForConfig(cfg)
	apitest.Must(t, err)
	pods := cs.CoreV1().Pods(ns)
	create := func(name, node, ip string) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
		p, err := pods.Create(ctx, p, metav1.CreateOptions{})
		apitest.Must(t, err)
		if ip != "" {
			setIP(t, pods, p, ip, corev1.PodRunning)
		}
	}
	for i := range 5 {
		create(fmt.Sprintf("before-%d", i), "n1", fmt.Sprintf("10.1.0.%d", i+1))
	}
	create("pending", "", "")

	var changes atomic.Int64
	p := newPodWatch(podsIn{cs.CoreV1().Pods(""), ns}, func() { changes.Add(1) }, slog.New(slog.DiscardHandler))
	p.pageSize = 2
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { p.run(runCtx); close(done) }()
	defer func() { cancel(); <-done }()
	apitest.Must(t, p.waitSynced(ctx))
	if got := kept(p); len(got) != 5 || got[0] != "n1=10.1.0.1" {
		t.Fatalf("after the list: %v, want the 5 pods with addresses", got)
	}

	create("later", "n2", "")
	later, err := pods.Get(ctx, "later", metav1.GetOptions{})
	apitest.Must(t, err)
	before := changes.Load()
	setIP(t, pods, later, "10.2.0.1", corev1.PodRunning)
	apitest.Eventually(t, "the new pod's address", 10*time.Second, func() bool { return slices.Contains(kept(p), "n2=10.2.0.1") })
	if changes.Load() == before {
		t.Error("a new route and no change reported")
	}
	// A label changes nothing routed: no change reported.
	later, err = pods.Get(ctx, "later", metav1.GetOptions{})
	apitest.Must(t, err)
	later.Labels = map[string]string{"x": "y"}
	_, err = pods.Update(ctx, later, metav1.UpdateOptions{})
	apitest.Must(t, err)
	n := changes.Load()
	time.Sleep(300 * time.Millisecond)
	if changes.Load() != n {
		t.Error("a label change reported as a route change")
	}
	// Finished: its address is free.
	later, err = pods.Get(ctx, "later", metav1.GetOptions{})
	apitest.Must(t, err)
	setIP(t, pods, later, "10.2.0.1", corev1.PodSucceeded)
	apitest.Eventually(t, "the finished pod gone", 10*time.Second, func() bool { return !slices.Contains(kept(p), "n2=10.2.0.1") })
	apitest.Must(t, pods.Delete(ctx, "before-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}))
	apitest.Eventually(t, "the deleted pod gone", 10*time.Second, func() bool { return !slices.Contains(kept(p), "n1=10.1.0.1") })
	if got := kept(p); len(got) != 4 {
		t.Errorf("at the end: %v, want the 4 pods left with addresses", got)
	}
}

// podsIn lists and watches one namespace of a cluster-wide client, so that the test sees only
// its own pods on a shared API server.
type podsIn struct {
	all interface {
		List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
		Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	}
	ns string
}

func (p podsIn) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	opts.FieldSelector = "metadata.namespace=" + p.ns
	return p.all.List(ctx, opts)
}

func (p podsIn) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.FieldSelector = "metadata.namespace=" + p.ns
	return p.all.Watch(ctx, opts)
}

func setIP(t *testing.T, pods interface {
	UpdateStatus(ctx context.Context, p *corev1.Pod, opts metav1.UpdateOptions) (*corev1.Pod, error)
}, p *corev1.Pod, ip string, phase corev1.PodPhase) {
	t.Helper()
	p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = phase, ip, []corev1.PodIP{{IP: ip}}
	if _, err := pods.UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkPodWatchAtLimits runs the pod watch against a real API server holding the 150,000
// pods of the Kubernetes scalability limits (SKEIN_BENCH_PODS overrides the count), over 5,000
// nodes: the first sync (paged protobuf list), the heap it keeps after a full collection, the
// highest heap seen while it lists (sampled every 5 ms), and the time from a pod's new address
// written to the API server to the watch holding it.
func BenchmarkPodWatchAtLimits(b *testing.B) {
	n := 150_000
	if s := os.Getenv("SKEIN_BENCH_PODS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	env := apitest.Start(b)
	ns := env.Namespace(b, "podscale")
	cfg := rest.CopyConfig(env.Config)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.QPS, cfg.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%06d", i), Namespace: ns,
					Labels: map[string]string{"app": "web"}},
					Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%04d", i%5000), Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1"}}}}
				p, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
				if err == nil {
					a := 10<<24 | 64<<16 + i
					ip := fmt.Sprintf("%d.%d.%d.%d", a>>24, a>>16&255, a>>8&255, a&255)
					p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodRunning, ip, []corev1.PodIP{{IP: ip}}
					_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
				}
				if err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	for i := range n {
		if failed.Load() != nil {
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if e := failed.Load(); e != nil {
		b.Fatal(*e)
	}
	b.Logf("%d pods created in %v", n, time.Since(start).Round(time.Second))

	var syncMs, keptMiB, peakMiB, eventMs float64
	for b.Loop() {
		b.StopTimer()
		base := heapInUse()
		var peak atomic.Uint64
		sampling, sampled := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(sampled)
			var m runtime.MemStats
			for {
				runtime.ReadMemStats(&m)
				if m.HeapInuse > peak.Load() {
					peak.Store(m.HeapInuse)
				}
				select {
				case <-sampling:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		}()
		changed := make(chan struct{}, 1)
		p := newPodWatch(cs.CoreV1().Pods(""), func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		}, slog.New(slog.DiscardHandler))
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		b.StartTimer()
		t0 := time.Now()
		go func() { p.run(runCtx); close(done) }()
		if err := p.waitSynced(ctx); err != nil {
			b.Fatal(err)
		}
		syncMs = float64(time.Since(t0).Milliseconds())
		b.StopTimer()
		close(sampling)
		<-sampled
		if got := len(p.appendTo(nil)); got != n {
			b.Fatalf("%d pods kept, want %d", got, n)
		}
		keptMiB = float64(heapInUse()-base) / (1 << 20)
		peakMiB = float64(peak.Load()-min(base, peak.Load())) / (1 << 20)
		// One pod's address changes: how long until the watch holds it.
		<-changed
		p0, err := cs.CoreV1().Pods(ns).Get(ctx, "web-000000", metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		p0.Status.PodIP, p0.Status.PodIPs = "10.127.0.1", []corev1.PodIP{{IP: "10.127.0.1"}}
		if p0, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p0, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		<-changed
		eventMs = float64(time.Since(t1).Microseconds()) / 1000
		if !slices.Contains(kept(p), "node-0000=10.127.0.1") {
			b.Fatal("the changed address is not kept")
		}
		p0.Status.PodIP, p0.Status.PodIPs = "10.64.0.0", []corev1.PodIP{{IP: "10.64.0.0"}}
		if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p0, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		cancel()
		<-done
		b.StartTimer()
	}
	b.ReportMetric(syncMs, "ms/sync")
	b.ReportMetric(keptMiB, "MiB-kept")
	b.ReportMetric(peakMiB, "MiB-peak-while-listing")
	b.ReportMetric(eventMs, "ms/event")
}
