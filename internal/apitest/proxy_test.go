package apitest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestProxy: requests pass through; frozen, they hang until their timeout; thawed, they pass
// again.
func TestProxy(t *testing.T) {
	e := Start(t)
	p := e.Proxy(t)
	cfg := rest.CopyConfig(e.Config)
	cfg.Host = "https://" + p.ln.Addr().String()
	cfg.Timeout = time.Second
	c, err := client.New(cfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	list := func() error { return c.List(context.Background(), &corev1.NamespaceList{}) }
	if err := list(); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.Freeze()
	start := time.Now()
	if err := list(); err == nil {
		t.Fatal("a request passed a frozen proxy")
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("a frozen proxy answered (an error) after %v: it should hang until the client's timeout", d)
	}
	if err := e.Client.List(context.Background(), &corev1.NamespaceList{}); err != nil {
		t.Errorf("the API server itself is unreachable: %v", err)
	}
	p.Thaw()
	// Thawed, the connections held open are closed: a client's next request may meet one of
	// them (a reset, which client-go retries after a second) before it reconnects, as it would
	// after a real outage. What must hold is that requests pass again, soon.
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := list()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15 s after the thaw, requests still fail: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
