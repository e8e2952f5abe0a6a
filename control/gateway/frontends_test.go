package gateway_test

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gateway"
)

// TestFrontEndsAgree describes one gateway twice, as a standalone file and as API objects,
// and wants the same configuration from both: the defaults come from config.Build alone, so
// the two front-ends cannot drift apart.
func TestFrontEndsAgree(t *testing.T) {
	file := `role: server
listenPort: 51820
privateKeyFile: KEYFILE
peerPublicKey: ` + testPub + `
remote:
  podCIDR: 10.244.0.0/16
  remappedPodCIDR: 10.71.0.0/16
  externalCIDR: 10.70.0.0/16
overlay:
  listen: 10.244.1.20
  ip: 10.80.0.1
  completeChecksums: false
nodes:
- name: n1
  vtep: 192.168.77.1
  mac: 02:00:00:00:00:11
  podCIDRs: [10.244.1.0/24]
`
	c, err := gateway.LoadFile(writeConfig(t, file))
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := c.Resolve()
	if err != nil {
		t.Fatal(err)
	}

	o := objects()
	o.Server.Spec.MTU = 0 // the API server would default it; Build must too
	o.InternalNodes = []netv1alpha1.InternalNode{{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: netv1alpha1.InternalNodeStatus{VTEP: &netv1alpha1.VTEP{IP: "192.168.77.1", MAC: "02:00:00:00:00:11"}}}}
	o.Nodes = []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}}}}
	o.Pods = nil
	fromObjects, err := gateway.FromObjects(o, gateway.Local{PodIP: local.PodIP})
	if err != nil {
		t.Fatal(err)
	}
	// The API objects say the external CIDR is seen as it is (status.remote equals spec).
	if !reflect.DeepEqual(fromFile, fromObjects) {
		t.Errorf("the two front-ends disagree:\nfile:    %+v\nobjects: %+v", *fromFile, *fromObjects)
	}
	if fromFile.Dataplane.TunnelMTU != netv1alpha1.DefaultMTU || fromFile.ProbeFail == 0 || fromFile.ProbeInterval == 0 || fromFile.MemoryLimit == 0 {
		t.Errorf("defaults not filled: %+v", *fromFile)
	}
}

// TestFileNamesEveryField: one run of a bad file names every bad field once, those that did
// not parse and those Build refuses.
func TestFileNamesEveryField(t *testing.T) {
	bad := strings.NewReplacer("peerPublicKey: "+testPub, "peerPublicKey: abc", "listen: 192.168.77.2", "listen: nowhere",
		"mtu: 1340", "mtu: 1340\nwindow: -1\nkeepaliveSeconds: 70000").Replace(goodServer)
	c, err := gateway.LoadFile(writeConfig(t, bad))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Resolve()
	if err == nil {
		t.Fatal("a bad file resolved")
	}
	for _, field := range []string{"peerPublicKey", "overlay.listen", "window", "keepaliveSeconds"} {
		if n := strings.Count(err.Error(), "\n  "+field+":"); n != 1 {
			t.Errorf("%s named %d times in:\n%v", field, n, err)
		}
	}
}
