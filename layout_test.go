package skein_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/skein-net/skein"

// goPackage is the part of `go list -json` output the layout rules read.
type goPackage struct {
	ImportPath   string
	Name         string
	Imports      []string // direct imports of the non-test files
	Deps         []string // transitive dependencies of the non-test files
	TestImports  []string
	XTestImports []string
}

// under reports whether path is the skein folder dir or inside it.
func under(path, dir string) bool {
	p := module + "/" + dir
	return path == p || strings.HasPrefix(path, p+"/")
}

// controlBinary returns which binary's folder of control/ path is in (controller, gateway or
// agent), or "".
func controlBinary(path string) string {
	for _, b := range []string{"controller", "gateway", "agent"} {
		if under(path, "control/"+b) {
			if b == "gateway" && under(path, "control/gateway/config") {
				return ""
			}
			return b
		}
	}
	return ""
}

// cmdTree returns "cmd/<name>" for a package under cmd/<name>, or "" if path is not under one.
func cmdTree(path string) string {
	rest, ok := strings.CutPrefix(path, module+"/cmd/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	return "cmd/" + name
}

func isGvisor(path string) bool {
	return strings.HasPrefix(path, "gvisor.dev/") || path == "golang.zx2c4.com/wireguard/tun/netstack"
}

func isKubernetes(path string) bool {
	return strings.HasPrefix(path, "k8s.io/") || strings.HasPrefix(path, "sigs.k8s.io/")
}

// heavyKubernetes reports Kubernetes client packages that register every built-in kind.
func heavyKubernetes(path string) bool {
	return strings.HasPrefix(path, "sigs.k8s.io/controller-runtime") || strings.HasPrefix(path, "k8s.io/api/") ||
		strings.HasPrefix(path, "k8s.io/client-go/kubernetes")
}

// gatewayForbidden reports packages the gateway must not link (see checkLayout).
func gatewayForbidden(path string) bool {
	if path == "k8s.io/api/core/v1" || path == "k8s.io/api/coordination/v1" {
		return false
	}
	return heavyKubernetes(path) || strings.HasPrefix(path, "github.com/prometheus/client_golang")
}

// checkLayout applies the dependency direction of DESIGN.md to a module's packages and returns
// one line per violation:
//
//		cmd -> appliance -> {control, netstack, dataplane}; control -> dataplane; netstack -> dataplane
//
//	  - dataplane depends (even transitively) on neither k8s.io nor gvisor.dev, nor on any other
//	    skein folder;
//	  - only netstack imports gvisor.dev (or wireguard-go's gVisor-based tun/netstack);
//	  - only cmd imports appliance, and nothing imports cmd (but a cmd/<name> folder's own packages);
//	  - control and netstack do not depend on appliance, cmd or each other;
//	  - product code does not import bench, and neither does internal/;
//	  - only tests and bench import internal/ (test infrastructure: k8sbin, apitest, netnstest,
//	    golden); internal/ packages may import each other;
//	  - control/ is grouped by binary: control/controller, control/gateway and control/agent do not
//	    depend on one another, except that anything may use the leaf control/gateway/config (the
//	    WireGuard key type and the key Secret's field names);
//	  - the node agent (cmd/skein-agent) depends on neither controller-runtime nor client-go's
//	    typed clients and scheme nor k8s.io/api: their registration of every built-in kind costs
//	    more memory than the agent's 30 MiB budget allows (control/agent/apiclient reads the API
//	    instead);
//	  - the gateway (cmd/skein-gateway) depends on neither controller-runtime nor client-go's
//	    typed clients and scheme nor the Prometheus client library, and of k8s.io/api only on
//	    core/v1 and coordination/v1 (a hub runs a gateway per peer, each within 16 MiB idle:
//	    control/gateway/api.go reads the API, appliance/metrics.go writes the metrics).
//
// Test files may import gvisor.dev in dataplane (gVisor's header package checks our parsers),
// but may not import appliance or cmd from outside them.
func checkLayout(pkgs []goPackage) []string {
	var bad []string
	report := func(p goPackage, format string, args ...any) {
		bad = append(bad, p.ImportPath+": "+fmt.Sprintf(format, args...))
	}
	for _, p := range pkgs {
		own := func(path string) bool { return strings.HasPrefix(path, module+"/") || path == module }
		for _, imp := range p.Imports {
			if isGvisor(imp) && !under(p.ImportPath, "netstack") {
				report(p, "imports %s; only netstack may import gVisor", imp)
			}
			if under(imp, "bench") && !under(p.ImportPath, "bench") {
				report(p, "imports %s; product code and internal/ must not depend on bench", imp)
			}
			if under(imp, "internal") && !under(p.ImportPath, "internal") && !under(p.ImportPath, "bench") {
				report(p, "imports %s; only tests and bench may import internal/ (test infrastructure)", imp)
			}
		}
		allImports := slices.Concat(p.Imports, p.TestImports, p.XTestImports)
		for _, imp := range allImports {
			if under(imp, "appliance") && !under(p.ImportPath, "appliance") && cmdTree(p.ImportPath) == "" {
				report(p, "imports %s; only cmd may import appliance", imp)
			}
			if t := cmdTree(imp); t != "" && t != cmdTree(p.ImportPath) || imp == module+"/cmd" && p.ImportPath != module+"/cmd" {
				report(p, "imports %s; nothing may import cmd", imp)
			}
		}
		if b := controlBinary(p.ImportPath); b != "" {
			for _, d := range p.Deps {
				if o := controlBinary(d); o != "" && o != b && !under(d, "control/gateway/config") {
					report(p, "depends on %s; control/controller, control/gateway and control/agent serve different binaries and share only control/gateway/config, api, kube and identity", d)
				}
			}
		}
		if p.ImportPath == module+"/cmd/skein-agent" {
			for _, d := range p.Deps {
				if heavyKubernetes(d) {
					report(p, "depends on %s; the node agent must stay off controller-runtime, client-go/kubernetes and k8s.io/api (see control/agent/apiclient)", d)
				}
			}
		}
		if p.ImportPath == module+"/cmd/skein-gateway" {
			for _, d := range p.Deps {
				if gatewayForbidden(d) {
					report(p, "depends on %s; the gateway must stay off controller-runtime, client-go/kubernetes, the Prometheus client library and k8s.io/api but core/v1 and coordination/v1 (see control/gateway/api.go)", d)
				}
			}
		}
		switch {
		case under(p.ImportPath, "dataplane"):
			for _, d := range p.Deps {
				switch {
				case isKubernetes(d) || isGvisor(d):
					report(p, "depends on %s; dataplane must stay free of k8s.io and gvisor.dev", d)
				case own(d) && !under(d, "dataplane"):
					report(p, "depends on %s; dataplane depends on no other skein folder", d)
				}
			}
		case under(p.ImportPath, "control"), under(p.ImportPath, "netstack"):
			for _, d := range p.Deps {
				if under(d, "appliance") || under(d, "cmd") ||
					under(p.ImportPath, "control") && under(d, "netstack") ||
					under(p.ImportPath, "netstack") && under(d, "control") {
					report(p, "depends on %s; control and netstack sit below appliance and beside each other", d)
				}
				if under(p.ImportPath, "control") && isGvisor(d) {
					report(p, "depends on %s; only netstack may pull in gVisor", d)
				}
			}
		}
	}
	return bad
}

func goList(t *testing.T) []goPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestLayout applies the rules to the real module.
func TestLayout(t *testing.T) {
	pkgs := goList(t)
	if len(pkgs) < 8 {
		t.Fatalf("go list found %d packages; is the test running at the module root?", len(pkgs))
	}
	for _, v := range checkLayout(pkgs) {
		t.Error(v)
	}
}

// TestLayoutRulesCatch feeds checkLayout one broken package per rule, proving each rule reports.
func TestLayoutRulesCatch(t *testing.T) {
	m := func(s string) string { return module + "/" + s }
	cases := []struct {
		name string
		pkg  goPackage
		want string
	}{
		{"dataplane imports client-go", goPackage{ImportPath: m("dataplane/nat"), Imports: []string{"k8s.io/client-go/rest"}, Deps: []string{"k8s.io/client-go/rest"}}, "free of k8s.io"},
		{"dataplane pulls gVisor transitively", goPackage{ImportPath: m("dataplane"), Imports: []string{"example.com/x"}, Deps: []string{"example.com/x", "gvisor.dev/gvisor/pkg/buffer"}}, "free of k8s.io and gvisor.dev"},
		{"dataplane imports control", goPackage{ImportPath: m("dataplane"), Imports: []string{m("control")}, Deps: []string{m("control")}}, "no other skein folder"},
		{"control imports gVisor", goPackage{ImportPath: m("control/controller/ipam"), Imports: []string{"gvisor.dev/gvisor/pkg/tcpip"}}, "only netstack may import gVisor"},
		{"appliance imports wireguard's netstack", goPackage{ImportPath: m("appliance"), Imports: []string{"golang.zx2c4.com/wireguard/tun/netstack"}}, "only netstack may import gVisor"},
		{"control imports appliance", goPackage{ImportPath: m("control"), Imports: []string{m("appliance")}}, "only cmd may import appliance"},
		{"bench test imports appliance", goPackage{ImportPath: m("bench/scenario"), XTestImports: []string{m("appliance")}}, "only cmd may import appliance"},
		{"appliance imports cmd", goPackage{ImportPath: m("appliance"), Imports: []string{m("cmd/skeinctl")}}, "nothing may import cmd"},
		{"one command imports another", goPackage{ImportPath: m("cmd/skein-agent"), Imports: []string{m("cmd/skeinctl/internal/out")}}, "nothing may import cmd"},
		{"control depends on netstack", goPackage{ImportPath: m("control"), Deps: []string{m("netstack")}}, "beside each other"},
		{"product imports bench", goPackage{ImportPath: m("control"), Name: "control", Imports: []string{m("bench/harness")}}, "must not depend on bench"},
		{"internal imports bench", goPackage{ImportPath: m("internal/apitest"), Name: "apitest", Imports: []string{m("bench/lab")}}, "must not depend on bench"},
		{"product imports internal", goPackage{ImportPath: m("control/controller"), Imports: []string{m("internal/apitest")}}, "only tests and bench may import internal/"},
		{"command imports internal", goPackage{ImportPath: m("cmd/skeinctl"), Imports: []string{m("internal/k8sbin")}}, "only tests and bench may import internal/"},
		{"controller depends on the gateway", goPackage{ImportPath: m("control/controller"), Deps: []string{m("control/gateway")}}, "serve different binaries"},
		{"agent depends on the controller", goPackage{ImportPath: m("control/agent"), Deps: []string{m("control/controller/ipam")}}, "serve different binaries"},
		{"agent pulls controller-runtime", goPackage{ImportPath: m("cmd/skein-agent"), Deps: []string{"sigs.k8s.io/controller-runtime/pkg/client"}}, "node agent must stay off"},
		{"agent pulls core/v1", goPackage{ImportPath: m("cmd/skein-agent"), Deps: []string{"k8s.io/api/core/v1"}}, "node agent must stay off"},
		{"gateway pulls controller-runtime", goPackage{ImportPath: m("cmd/skein-gateway"), Deps: []string{"sigs.k8s.io/controller-runtime/pkg/cache"}}, "gateway must stay off"},
		{"gateway pulls the typed clientset", goPackage{ImportPath: m("cmd/skein-gateway"), Deps: []string{"k8s.io/client-go/kubernetes"}}, "gateway must stay off"},
		{"gateway pulls apps/v1", goPackage{ImportPath: m("cmd/skein-gateway"), Deps: []string{"k8s.io/api/apps/v1"}}, "gateway must stay off"},
		{"gateway pulls the Prometheus client", goPackage{ImportPath: m("cmd/skein-gateway"), Deps: []string{"github.com/prometheus/client_golang/prometheus"}}, "gateway must stay off"},
	}
	for _, tc := range cases {
		got := checkLayout([]goPackage{tc.pkg})
		if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), tc.want) {
			t.Errorf("%s: got %q, want a violation saying %q", tc.name, got, tc.want)
		}
	}
	allowed := []goPackage{
		{ImportPath: m("cmd/skein-gateway"), Imports: []string{m("appliance")}, Deps: []string{"k8s.io/api/core/v1", "k8s.io/api/coordination/v1", "k8s.io/client-go/rest"}},
		{ImportPath: m("cmd/skeinctl"), Imports: []string{m("cmd/skeinctl/internal/out")}},
		{ImportPath: m("appliance"), Imports: []string{m("netstack"), m("control"), m("dataplane")}},
		{ImportPath: m("netstack"), Imports: []string{"gvisor.dev/gvisor/pkg/tcpip/stack", m("dataplane")}, Deps: []string{m("dataplane")}},
		{ImportPath: m("dataplane"), Imports: []string{"golang.zx2c4.com/wireguard/tun"}, TestImports: []string{"gvisor.dev/gvisor/pkg/tcpip/header"}},
		{ImportPath: m("internal/apitest"), Name: "apitest", Imports: []string{m("internal/k8sbin")}},
		{ImportPath: m("control/controller"), Imports: []string{m("control/gateway/config")}, Deps: []string{m("control/gateway/config")}, XTestImports: []string{m("internal/apitest")}},
		{ImportPath: m("bench/e2e"), Imports: []string{m("internal/k8sbin")}},
		{ImportPath: m("control/translate"), Imports: []string{m("dataplane")}, Deps: []string{m("dataplane")}},
	}
	if got := checkLayout(allowed); len(got) != 0 {
		t.Errorf("allowed imports reported: %q", got)
	}
}
