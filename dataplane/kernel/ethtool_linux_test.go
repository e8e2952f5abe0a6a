package kernel_test

import (
	"strings"
	"testing"

	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/internal/netnstest"
)

func TestTxChecksum(t *testing.T) {
	netnstest.RequireRoot(t)
	ns := netnstest.New(t, "ethtool")
	ns.Run(t, "ip", "link", "add", "vx0", "type", "vxlan", "id", "1", "dstport", "4789", "nolearning")
	err := ns.Do(func() error {
		for _, want := range []bool{false, true, false} {
			if err := kernel.SetTxChecksum("vx0", want); err != nil {
				return err
			}
			if got, err := kernel.TxChecksum("vx0"); err != nil || got != want {
				t.Errorf("after SetTxChecksum(%v): TxChecksum = %v, %v", want, got, err)
			}
		}
		if err := kernel.SetTxChecksum("nosuchlink", false); err == nil || !strings.Contains(err.Error(), "nosuchlink") {
			t.Errorf("missing link: %v", err)
		}
		if err := kernel.SetTxChecksum("a-name-longer-than-ifnamsiz", false); err == nil {
			t.Errorf("an overlong name was accepted")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
