package v1alpha1_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/internal/apitest"
)

var env *apitest.Env

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // the tests that need the API server skip (requireAPI)
	}
	e, stop, err := apitest.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	env = e
	code := m.Run()
	stop()
	os.Exit(code)
}

// requireAPI skips a test that needs the API server in -short mode (make test-unit).
func requireAPI(t *testing.T) {
	t.Helper()
	if env == nil {
		t.Skip(apitest.ShortSkip)
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// decode parses one YAML manifest as the API server will receive it.
func decode(t *testing.T, manifest []byte) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(manifest, &m); err != nil {
		t.Fatalf("parse manifest: %v\n%s", err, manifest)
	}
	return &unstructured.Unstructured{Object: m}
}

// TestSpecManifestsAccepted applies every example manifest of spec/003 unchanged, as
// `kubectl apply` would (default namespace where the manifest names none), and reads each back
// into the Go types to prove the field names match.
func TestSpecManifestsAccepted(t *testing.T) {
	requireAPI(t)
	files, err := filepath.Glob("testdata/spec003/*.yaml")
	if err != nil || len(files) != 5 {
		t.Fatalf("want the 5 manifests of spec/003 in testdata/spec003, got %v (%v)", files, err)
	}
	ns := env.Namespace(t, "spec003")
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		obj := decode(t, raw)
		obj.SetNamespace(ns) // the spec applies them to "default"; a namespace per test keeps runs apart
		if err := env.Client.Create(ctx(t), obj); err != nil {
			t.Errorf("%s: the API server rejected the spec's manifest: %v", f, err)
		}
	}

	var conf netv1alpha1.Configuration
	mustGet(t, ns, "dry-paper", &conf)
	if conf.Spec.Remote.CIDR.Pod != "10.243.0.0/16" || conf.Spec.Remote.CIDR.External != "10.70.0.0/16" {
		t.Errorf("Configuration spec.remote.cidr = %+v, want pod 10.243.0.0/16 external 10.70.0.0/16", conf.Spec.Remote.CIDR)
	}
	if got := conf.Labels[netv1alpha1.RemoteClusterIDLabel]; got != "506f88d4-9918-4848-ab74-2a75ae32647f" {
		t.Errorf("Configuration remote cluster id label = %q", got)
	}

	var gws netv1alpha1.GatewayServer
	mustGet(t, ns, "server", &gws)
	ep := gws.Spec.Endpoint
	if ep.Port != 51820 || ep.ServiceType != "NodePort" || gws.Spec.MTU != 1340 ||
		gws.Spec.ServerTemplateRef != (netv1alpha1.TemplateRef{APIVersion: "networking.liqo.io/v1alpha1", Kind: "WgGatewayServerTemplate", Name: "wireguard-server", Namespace: "liqo"}) {
		t.Errorf("GatewayServer spec = %+v", gws.Spec)
	}

	var gwc netv1alpha1.GatewayClient
	mustGet(t, ns, "client", &gwc)
	if !reflect.DeepEqual(gwc.Spec.Endpoint, netv1alpha1.Endpoint{Addresses: []netv1alpha1.Address{"10.42.3.54"}, Port: 32133, Protocol: "UDP"}) ||
		gwc.Spec.MTU != 1340 || gwc.Spec.ClientTemplateRef.Name != "wireguard-client" || gwc.Spec.ClientTemplateRef.Kind != "WgGatewayClientTemplate" {
		t.Errorf("GatewayClient spec = %+v", gwc.Spec)
	}

	for name, want := range map[string]string{"dry-paper": "GExyYe7RJ3Lo5nQVa6K2Tp9zobXCvWmJawsLxu7hn10=", "crimson-field": "NB+3xA4a0SIVsta9zwWn/mPc4J86GPmUdSChJG5rxlk="} {
		var pk netv1alpha1.PublicKey
		mustGet(t, ns, name, &pk)
		if pk.Spec.PublicKey != want {
			t.Errorf("PublicKey %s = %q, want %q", name, pk.Spec.PublicKey, want)
		}
		if _, err := pk.Spec.Key(); err != nil {
			t.Errorf("PublicKey %s: %v", name, err)
		}
		if pk.Labels[netv1alpha1.GatewayResourceLabel] != "true" {
			t.Errorf("PublicKey %s lost its %s label", name, netv1alpha1.GatewayResourceLabel)
		}
	}
}

// TestIPv6CIDRsAccepted: every CIDR field takes IPv6 as well as IPv4: a dual-stack peer (its
// IPv6 pod CIDR beside the IPv4 one), and an IPv6-only peer.
func TestIPv6CIDRsAccepted(t *testing.T) {
	requireAPI(t)
	ns := env.Namespace(t, "ipv6")
	for name, cidr := range map[string]netv1alpha1.ClusterConfigCIDR{
		"dual-stack": {Pod: "10.243.0.0/16", External: "10.70.0.0/16", AdditionalPods: []netv1alpha1.CIDR{"fd00:10:244::/56"}, AdditionalExternals: []netv1alpha1.CIDR{"2001:db8:70::/64"}},
		"ipv6-only":  {Pod: "fd00:10:244::/56", External: "2001:db8:ffff:ffff:ffff:ffff:ffff:0/112"},
	} {
		conf := &netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: cidr}}}
		if err := env.Client.Create(ctx(t), conf); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestDefaults checks the spec's defaults are applied at admission: MTU 1340, port 51820,
// service type LoadBalancer, protocol UDP.
func TestDefaults(t *testing.T) {
	requireAPI(t)
	ns := env.Namespace(t, "defaults")
	gws := &netv1alpha1.GatewayServer{
		ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: ns},
		Spec:       netv1alpha1.GatewayServerSpec{ServerTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayServerTemplate", Name: "wireguard-server"}},
	}
	// Send it without the Go zero values so the server sees absent fields.
	u := decode(t, []byte(`
apiVersion: networking.liqo.io/v1alpha1
kind: GatewayServer
metadata: {name: gw, namespace: `+ns+`}
spec:
  serverTemplateRef: {kind: WgGatewayServerTemplate, name: wireguard-server}
`))
	if err := env.Client.Create(ctx(t), u); err != nil {
		t.Fatal(err)
	}
	mustGet(t, ns, "gw", gws)
	if gws.Spec.MTU != 1340 || gws.Spec.Endpoint.Port != 51820 || gws.Spec.Endpoint.ServiceType != "LoadBalancer" {
		t.Errorf("defaults not applied: %+v", gws.Spec)
	}
	u = decode(t, []byte(`
apiVersion: networking.liqo.io/v1alpha1
kind: GatewayClient
metadata: {name: gw, namespace: `+ns+`}
spec:
  clientTemplateRef: {kind: WgGatewayClientTemplate, name: wireguard-client}
  endpoint: {addresses: [gw.example.com], port: 30316}
`))
	if err := env.Client.Create(ctx(t), u); err != nil {
		t.Fatal(err)
	}
	var gwc netv1alpha1.GatewayClient
	mustGet(t, ns, "gw", &gwc)
	if gwc.Spec.MTU != 1340 || gwc.Spec.Endpoint.Protocol != netv1alpha1.ProtocolUDP {
		t.Errorf("defaults not applied: %+v", gwc.Spec)
	}
}

func mustGet(t *testing.T, ns, name string, obj client.Object) {
	t.Helper()
	if err := env.Client.Get(ctx(t), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatalf("get %T %s/%s: %v", obj, ns, name, err)
	}
}

// TestTableColumns reads the server-side table (what `kubectl get` prints) for each kind the
// spec shows, after filling status the way the controller will, and checks the columns and the
// values in them.
func TestTableColumns(t *testing.T) {
	requireAPI(t)
	ns := env.Namespace(t, "columns")
	c := ctx(t)
	create := func(manifest string) {
		t.Helper()
		u := decode(t, []byte(manifest))
		u.SetNamespace(ns)
		if err := env.Client.Create(c, u); err != nil {
			t.Fatal(err)
		}
	}
	spec := func(name string) string {
		raw, err := os.ReadFile(filepath.Join("testdata/spec003", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	create(spec("configuration.yaml"))
	create(spec("gatewayserver.yaml"))
	create(spec("gatewayclient.yaml"))
	create(`
apiVersion: networking.liqo.io/v1alpha1
kind: Connection
metadata: {name: crimson-field}
spec: {type: Client, gatewayRef: {name: client}}
`)

	var conf netv1alpha1.Configuration
	mustGet(t, ns, "dry-paper", &conf)
	conf.Status.Remote = &netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.71.0.0/16", External: "10.72.0.0/16"}}
	if err := env.Client.Status().Update(c, &conf); err != nil {
		t.Fatal(err)
	}
	var gws netv1alpha1.GatewayServer
	mustGet(t, ns, "server", &gws)
	ip := netv1alpha1.IP("169.254.18.1")
	gws.Status.Endpoint = &netv1alpha1.Endpoint{Addresses: []netv1alpha1.Address{"10.42.3.54"}, Port: 32133, Protocol: netv1alpha1.ProtocolUDP}
	gws.Status.InternalEndpoint = &netv1alpha1.InternalEndpoint{IP: &ip}
	if err := env.Client.Status().Update(c, &gws); err != nil {
		t.Fatal(err)
	}
	var conn netv1alpha1.Connection
	mustGet(t, ns, "crimson-field", &conn)
	conn.Status.Value = netv1alpha1.Connected
	conn.Status.Latency = &netv1alpha1.ConnectionLatency{Value: metav1.Duration{Duration: 1200 * time.Microsecond}, Timestamp: metav1.Now()}
	if err := env.Client.Status().Update(c, &conn); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		resource string
		columns  []string
		row      []string // cells before AGE
	}{
		{"configurations", []string{"NAME", "DESIRED POD CIDR", "REMAPPED POD CIDR", "AGE"}, []string{"dry-paper", "10.243.0.0/16", "10.71.0.0/16"}},
		{"gatewayservers", []string{"NAME", "TEMPLATE NAME", "IP", "PORT", "AGE"}, []string{"server", "wireguard-server", "10.42.3.54", "32133"}},
		{"gatewayclients", []string{"NAME", "TEMPLATE NAME", "IP", "PORT", "AGE"}, []string{"client", "wireguard-client", "10.42.3.54", "32133"}},
		{"connections", []string{"NAME", "TYPE", "STATUS", "AGE"}, []string{"crimson-field", "Client", "Connected"}},
	} {
		table := getTable(t, ns, tc.resource)
		var cols []string
		var idx []int
		for i, col := range table.ColumnDefinitions {
			if col.Priority == 0 {
				cols = append(cols, strings.ToUpper(col.Name))
				idx = append(idx, i)
			}
		}
		if !reflect.DeepEqual(cols, tc.columns) {
			t.Errorf("%s: columns %q, want %q as the spec prints them", tc.resource, cols, tc.columns)
			continue
		}
		if len(table.Rows) != 1 {
			t.Errorf("%s: %d rows, want 1", tc.resource, len(table.Rows))
			continue
		}
		var cells []string
		for _, i := range idx[:len(idx)-1] {
			cells = append(cells, fmt.Sprint(table.Rows[0].Cells[i]))
		}
		if !reflect.DeepEqual(cells, tc.row) {
			t.Errorf("%s: row %q, want %q", tc.resource, cells, tc.row)
		}
	}

	// The same through the kubectl binary users run, header line as the spec prints it.
	out := kubectl(t, "get", "configurations.networking.liqo.io", "-A")
	if !strings.HasPrefix(out, "NAMESPACE") || !regexpFields(out, "NAMESPACE", "NAME", "DESIRED POD CIDR", "REMAPPED POD CIDR", "AGE") {
		t.Errorf("kubectl get configurations -A printed:\n%s", out)
	}
	out = kubectl(t, "get", "gatewayservers.networking.liqo.io", "-n", ns)
	if !regexpFields(out, "NAME", "TEMPLATE NAME", "IP", "PORT", "AGE") || !strings.Contains(out, "wireguard-server   10.42.3.54   32133") {
		t.Errorf("kubectl get gatewayservers printed:\n%s", out)
	}
}

// regexpFields reports whether the first line of out holds the given headers in order, separated
// by at least two spaces (kubectl's column gap).
func regexpFields(out string, headers ...string) bool {
	line, _, _ := strings.Cut(out, "\n")
	var got []string
	for _, f := range strings.Split(line, "  ") {
		if f = strings.TrimSpace(f); f != "" {
			got = append(got, f)
		}
	}
	return reflect.DeepEqual(got, headers)
}

func getTable(t *testing.T, ns, resource string) *metav1.Table {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := dc.RESTClient().Get().
		AbsPath("/apis/networking.liqo.io/v1alpha1/namespaces", ns, resource).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
		DoRaw(ctx(t))
	if err != nil {
		t.Fatalf("get %s as Table: %v", resource, err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatalf("decode %s Table: %v", resource, err)
	}
	return &table
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := env.Kubectl(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMalformedRejected sends objects a user could plausibly get wrong and checks that admission
// rejects each with a message that names the field and says what is expected.
func TestMalformedRejected(t *testing.T) {
	var cidrs []string
	for i := range 16 {
		cidrs = append(cidrs, fmt.Sprintf("10.%d.0.0/16", i+1))
	}
	sixteenCIDRs := strings.Join(cidrs, ", ")
	requireAPI(t)
	ns := env.Namespace(t, "malformed")
	const (
		conf = "apiVersion: networking.liqo.io/v1alpha1\nkind: Configuration\nmetadata: {name: bad}\n"
		gws  = "apiVersion: networking.liqo.io/v1alpha1\nkind: GatewayServer\nmetadata: {name: bad}\n"
		gwc  = "apiVersion: networking.liqo.io/v1alpha1\nkind: GatewayClient\nmetadata: {name: bad}\n"
		pk   = "apiVersion: networking.liqo.io/v1alpha1\nkind: PublicKey\nmetadata: {name: bad}\n"
		conn = "apiVersion: networking.liqo.io/v1alpha1\nkind: Connection\nmetadata: {name: bad}\n"
		node = "apiVersion: networking.liqo.io/v1alpha1\nkind: InternalNode\nmetadata: {name: bad}\n"
		tmpl = "{kind: WgGatewayServerTemplate, name: wireguard-server}"
		ctpl = "{kind: WgGatewayClientTemplate, name: wireguard-client}"
	)
	cases := []struct {
		name     string
		manifest string
		field    string // the field path the message must name
		says     string // what the message must say
	}{
		{"cidr prefix too long", conf + "spec: {remote: {cidr: {pod: 10.243.0.0/33, external: 10.70.0.0/16}}}", "spec.remote.cidr.pod", "must be a CIDR"},
		{"cidr not an address", conf + "spec: {remote: {cidr: {pod: pods, external: 10.70.0.0/16}}}", "spec.remote.cidr.pod", "must be a CIDR"},
		{"cidr host bits", conf + "spec: {remote: {cidr: {pod: 10.243.0.0/16, external: 10.70.1.0/16}}}", "spec.remote.cidr.external", "host bits zero"},
		{"cidr missing", conf + "spec: {remote: {cidr: {pod: 10.243.0.0/16}}}", "spec.remote.cidr.external", "Required value"},
		{"cidr default route", conf + "spec: {remote: {cidr: {pod: 0.0.0.0/0, external: 10.70.0.0/16}}}", "spec.remote.cidr.pod", "must not be a default route"},
		{"cidr link-local", conf + "spec: {remote: {cidr: {pod: 10.243.0.0/16, external: 169.254.0.0/16}}}", "spec.remote.cidr.external", "169.254.0.0/16 (link-local"},
		{"cidr inside loopback", conf + "spec: {remote: {cidr: {pod: 127.1.0.0/16, external: 10.70.0.0/16}}}", "spec.remote.cidr.pod", "127.0.0.0/8 (loopback)"},
		{"cidr covering multicast", conf + "spec: {remote: {cidr: {pod: 10.243.0.0/16, external: 192.0.0.0/2}}}", "spec.remote.cidr.external", "224.0.0.0/4 (multicast)"},
		{"additional pod cidr loopback", conf + "spec: {remote: {cidr: {pod: 10.243.0.0/16, external: 10.70.0.0/16, additionalPods: [10.244.0.0/16, 127.0.0.0/8]}}}", "spec.remote.cidr.additionalPods[1]", "127.0.0.0/8 (loopback)"},
		{"additional pod cidr not a cidr", conf + "spec: {remote: {cidr: {pod: 10.243.0.0/16, external: 10.70.0.0/16, additionalPods: [pods]}}}", "spec.remote.cidr.additionalPods[0]", "must be a CIDR"},
		{"additional pod cidr twice", conf + "spec: {remote: {cidr: {pod: 10.243.0.0/16, external: 10.70.0.0/16, additionalPods: [10.244.0.0/16, 10.244.0.0/16]}}}", "spec.remote.cidr.additionalPods[1]", "Duplicate value"},
		{"additional external default route", conf + "spec: {remote: {cidr: {pod: 10.243.0.0/16, external: 10.70.0.0/16, additionalExternals: [0.0.0.0/0]}}}", "spec.remote.cidr.additionalExternals[0]", "must not be a default route"},
		{"sixteen additional pod cidrs", conf + "spec: {remote: {cidr: {pod: 10.243.0.0/16, external: 10.70.0.0/16, additionalPods: [" + sixteenCIDRs + "]}}}", "spec.remote.cidr.additionalPods", "must have at most 15 items"},
		{"cidr inside the tunnel /30", conf + "spec: {remote: {cidr: {pod: 169.254.100.0/30, external: 10.70.0.0/16}}}", "spec.remote.cidr.pod", "link-local"},
		{"ipv6 default route", conf + "spec: {remote: {cidr: {pod: '::/0', external: 10.70.0.0/16}}}", "spec.remote.cidr.pod", "must not be a default route"},
		{"ipv6 host bits", conf + "spec: {remote: {cidr: {pod: 'fd00:244::1/56', external: 10.70.0.0/16}}}", "spec.remote.cidr.pod", "host bits zero"},
		{"ipv6 link-local", conf + "spec: {remote: {cidr: {pod: 10.243.0.0/16, external: 'fe80::/64'}}}", "spec.remote.cidr.external", "fe80::/10 (link-local)"},
		{"ipv6 gateways' own", conf + "spec: {remote: {cidr: {pod: '64:ff9b:1::/64', external: 10.244.0.0/16}}}", "spec.remote.cidr.pod", "::/8 (unspecified"},
		{"ipv6 multicast", conf + "spec: {remote: {cidr: {pod: 10.243.0.0/16, external: 10.70.0.0/16, additionalPods: ['ff05::/16']}}}", "spec.remote.cidr.additionalPods[0]", "ff00::/8 (multicast)"},
		{"ipv6 loopback", conf + "spec: {remote: {cidr: {pod: '::1/128', external: 10.70.0.0/16}}}", "spec.remote.cidr.pod", "::/8 (unspecified, loopback"},
		{"ipv6 covering the reserved ranges", conf + "spec: {remote: {cidr: {pod: 10.243.0.0/16, external: 10.70.0.0/16, additionalExternals: ['::/1']}}}", "spec.remote.cidr.additionalExternals[0]", "::/8 (unspecified"},
		{"ipv4-mapped ipv6", conf + "spec: {remote: {cidr: {pod: '::ffff:10.0.0.0/104', external: 10.70.0.0/16}}}", "spec.remote.cidr.pod", "must"},
		{"server port 0", gws + "spec: {endpoint: {port: 0}, serverTemplateRef: " + tmpl + "}", "spec.endpoint.port", "greater than or equal to 1"},
		{"server port 70000", gws + "spec: {endpoint: {port: 70000}, serverTemplateRef: " + tmpl + "}", "spec.endpoint.port", "less than or equal to 65535"},
		{"unknown service type", gws + "spec: {endpoint: {serviceType: Ingress}, serverTemplateRef: " + tmpl + "}", "spec.endpoint.serviceType", `supported values: "NodePort", "LoadBalancer", "ClusterIP"`},
		{"mtu 100", gws + "spec: {mtu: 100, serverTemplateRef: " + tmpl + "}", "spec.mtu", "greater than or equal to 576"},
		{"mtu 65000", gws + "spec: {mtu: 65000, serverTemplateRef: " + tmpl + "}", "spec.mtu", "less than or equal to 9000"},
		{"missing server template ref", gws + "spec: {mtu: 1340}", "spec.serverTemplateRef", "Required value"},
		{"empty template name", gws + "spec: {serverTemplateRef: {kind: WgGatewayServerTemplate, name: ''}}", "spec.serverTemplateRef.name", "at least 1 chars long"},
		{"node port outside range", gws + "spec: {endpoint: {serviceType: NodePort, nodePort: 8080}, serverTemplateRef: " + tmpl + "}", "spec.endpoint.nodePort", "30000-32767"},
		{"node port with ClusterIP", gws + "spec: {endpoint: {serviceType: ClusterIP, nodePort: 30001}, serverTemplateRef: " + tmpl + "}", "spec.endpoint", "nodePort can only be set when serviceType is NodePort or LoadBalancer"},
		{"bad load balancer IP", gws + "spec: {endpoint: {loadBalancerIP: 1.2.3}, serverTemplateRef: " + tmpl + "}", "spec.endpoint.loadBalancerIP", "must be empty or an IP address"},
		{"load balancer IP with NodePort", gws + "spec: {endpoint: {serviceType: NodePort, loadBalancerIP: 192.0.2.1}, serverTemplateRef: " + tmpl + "}", "spec.endpoint", "loadBalancerIP can only be set when serviceType is LoadBalancer"},
		{"client bad address", gwc + "spec: {endpoint: {addresses: [10.42.3.300], port: 32133}, clientTemplateRef: " + ctpl + "}", "spec.endpoint.addresses[0]", "must be an IP address"},
		{"client no address", gwc + "spec: {endpoint: {addresses: [], port: 32133}, clientTemplateRef: " + ctpl + "}", "spec.endpoint.addresses", "at least 1 items"},
		{"client port 0", gwc + "spec: {endpoint: {addresses: [10.42.3.54], port: 0}, clientTemplateRef: " + ctpl + "}", "spec.endpoint.port", "greater than or equal to 1"},
		{"client protocol TCP", gwc + "spec: {endpoint: {addresses: [10.42.3.54], port: 32133, protocol: TCP}, clientTemplateRef: " + ctpl + "}", "spec.endpoint.protocol", `supported values: "UDP"`},
		{"missing client template ref", gwc + "spec: {endpoint: {addresses: [10.42.3.54], port: 32133}}", "spec.clientTemplateRef", "Required value"},
		{"public key too short", pk + "spec: {publicKey: AAAAAAAAAAAAAAAAAAAAAA==}", "spec.publicKey", "32 bytes, base64-encoded"},
		{"public key not base64", pk + "spec: {publicKey: 'not a key!'}", "spec.publicKey", "base64"},
		{"public key missing", pk + "spec: {}", "spec.publicKey", "Required value"},
		{"connection type", conn + "spec: {type: Peer, gatewayRef: {name: gw}}", "spec.type", `supported values: "Server", "Client"`},
		{"internal node overlay ip", node + "spec: {overlayIP: 10.80.0.300}", "spec.overlayIP", "must be an IP address"},
	}
	if len(cases) < 15 {
		t.Fatalf("only %d malformed cases", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := decode(t, []byte(tc.manifest))
			if u.GetKind() != "InternalNode" {
				u.SetNamespace(ns)
			}
			err := env.Client.Create(ctx(t), u)
			if err == nil {
				_ = env.Client.Delete(ctx(t), u)
				t.Fatalf("accepted:\n%s", tc.manifest)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("rejected, but not as invalid: %v", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.field+":") || !strings.Contains(msg, tc.says) {
				t.Errorf("message does not name field %q and say %q:\n%s", tc.field, tc.says, msg)
			}
		})
	}
}

// TestMalformedStatusRejected checks status writes are validated too: a bad value a buggy
// component writes is refused, not stored.
func TestMalformedStatusRejected(t *testing.T) {
	requireAPI(t)
	ns := env.Namespace(t, "badstatus")
	c := ctx(t)
	conn := &netv1alpha1.Connection{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns},
		Spec:       netv1alpha1.ConnectionSpec{Type: netv1alpha1.ConnectionTypeServer, GatewayRef: netv1alpha1.ObjectRef{Name: "server"}},
	}
	if err := env.Client.Create(c, conn); err != nil {
		t.Fatal(err)
	}
	conn.Status.Value = "Up"
	err := env.Client.Status().Update(c, conn)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.value") {
		t.Errorf("status.value Up: want invalid naming status.value, got %v", err)
	}

	node := &netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: "badstatus-" + ns}}
	if err := env.Client.Create(c, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	node.Status.VTEP = &netv1alpha1.VTEP{IP: "192.0.2.7", MAC: "zz:00:00:00:00:01"}
	err = env.Client.Status().Update(c, node)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.vtep.mac") {
		t.Errorf("status.vtep.mac zz:..: want invalid naming status.vtep.mac, got %v", err)
	}
}

// TestStatusSubresource checks that status is a subresource: a spec update cannot change it
// and a status update cannot change spec.
func TestStatusSubresource(t *testing.T) {
	requireAPI(t)
	ns := env.Namespace(t, "subresource")
	c := ctx(t)
	conf := &netv1alpha1.Configuration{
		ObjectMeta: metav1.ObjectMeta{Name: "peer", Namespace: ns},
		Spec:       netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.243.0.0/16", External: "10.70.0.0/16"}}},
		Status:     netv1alpha1.ConfigurationStatus{Remote: &netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.99.0.0/16", External: "10.98.0.0/16"}}},
	}
	if err := env.Client.Create(c, conf); err != nil {
		t.Fatal(err)
	}
	mustGet(t, ns, "peer", conf)
	if conf.Status.Remote != nil {
		t.Errorf("create stored status %+v; status must only change through the subresource", conf.Status.Remote)
	}
	conf.Status.Remote = &netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.71.0.0/16", External: "10.72.0.0/16"}}
	conf.Spec.Remote.CIDR.Pod = "10.1.0.0/16"
	if err := env.Client.Status().Update(c, conf); err != nil {
		t.Fatal(err)
	}
	mustGet(t, ns, "peer", conf)
	if conf.Spec.Remote.CIDR.Pod != "10.243.0.0/16" || conf.Status.Remote == nil || conf.Status.Remote.CIDR.Pod != "10.71.0.0/16" {
		t.Errorf("after a status update: spec pod %s, status %+v", conf.Spec.Remote.CIDR.Pod, conf.Status.Remote)
	}
}
