package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/skein-net/skein/bench/lab"
)

// TestConnectTime is the connect-time section of make bench's report (bench/harness,
// connect.go): the lab, skein installed with Helm in both clusters as TestE2E installs it (2
// gateway replicas), then skeinctl network connect --wait between the two fresh installs,
// timed to "Connection is established" on both sides, with skeinctl's breakdown of where the
// time went. It is TestE2E's install and connect steps alone (1-3 minutes instead of 7,
// the same report line), and runs only when SKEIN_CONNECT_TIME is set, as the harness sets it:
//
//	SKEIN_CONNECT_TIME=1 go test -count 1 -v -timeout 20m -run '^TestConnectTime$' ./bench/e2e/
func TestConnectTime(t *testing.T) {
	if os.Getenv("SKEIN_CONNECT_TIME") == "" {
		t.Skip("the connect time is measured by make bench (SKEIN_CONNECT_TIME=1); TestE2E's connect step measures the same")
	}
	// The harness names the lab (SKEIN_CONNECT_TIME_PREFIX), so that it can remove it if this
	// process is killed before its cleanup runs.
	e := setupLab(t, false, lab.Options{Prefix: os.Getenv("SKEIN_CONNECT_TIME_PREFIX")})
	defer func() { fmt.Printf("\n=== skein connect time report\n%s\n", e.report.String()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if !t.Run("install", func(t *testing.T) { e.t = t; e.install(ctx, 2) }) {
		return
	}
	t.Run("connect", func(t *testing.T) { e.t = t; e.connect(ctx) })
}
