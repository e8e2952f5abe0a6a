package gateway_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/skein-net/skein/control/gateway"
	"github.com/skein-net/skein/internal/apitest"
)

// TestElectionAfterHungConnections: the active replica's connections to the API server hang
// (a restarted API server whose old connections nobody closes) while a standby still reaches
// it. After the API server answers again the active replica must renew before the standby's
// LeaseDuration runs out: with the dead HTTP/2 connection reused for every renewal it did
// not (client-go notices a dead connection only after its 30 s read-idle and 15 s ping
// timeouts), and the standby took over while the old active still forwarded: in the soak,
// gaps of 9.5 s and 44.9 s after API server restarts.
func TestElectionAfterHungConnections(t *testing.T) {
	env := apitest.Start(t)
	ns := env.Namespace(t, "election")
	proxy := env.Proxy(t)
	viaProxy, err := clientcmd.BuildConfigFromFlags("", proxy.KubeconfigFile(t, env))
	apitest.Must(t, err)
	e := gateway.Election{LeaseDuration: 10 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var aActive, bActive atomic.Bool
	run := func(name string, cfgHost bool, active *atomic.Bool) chan error {
		el := e
		el.PodName = name
		cfg := env.Config
		if cfgHost {
			cfg = viaProxy
		}
		done := make(chan error, 1)
		go func() {
			done <- gateway.RunElection(ctx, cfg, ns, "gw", el, func() { active.Store(true) }, func() { active.Store(false) })
		}()
		return done
	}
	doneA := run("rep-a", true, &aActive)
	apitest.Eventually(t, "rep-a active", 10*time.Second, aActive.Load)
	doneB := run("rep-b", false, &bActive)
	time.Sleep(2 * time.Second)
	if bActive.Load() {
		t.Fatal("rep-b took over from a healthy rep-a")
	}

	proxy.Freeze()
	time.Sleep(time.Second)
	proxy.ThawHung()
	thawed := time.Now()
	for time.Since(thawed) < 15*time.Second {
		if bActive.Load() {
			t.Fatalf("rep-b took over %v after the API server answered rep-a again: rep-a did not renew in time", time.Since(thawed).Round(100*time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !aActive.Load() {
		t.Error("rep-a is not active")
	}
	cancel()
	<-doneA
	<-doneB
}
