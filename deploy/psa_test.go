package deploy

import (
	"path/filepath"
	"testing"

	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// podSecurity evaluates a pod against a Pod Security Standards level with the evaluator the
// API server's admission plugin runs (k8s.io/pod-security-admission), at the newest version.
func podSecurity(level psaapi.Level, meta metav1.ObjectMeta, spec corev1.PodSpec) (policy.AggregateCheckResult, error) {
	e, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		return policy.AggregateCheckResult{}, err
	}
	return policy.AggregateCheckResults(e.EvaluatePod(psaapi.LevelVersion{Level: level, Version: psaapi.LatestVersion()}, &meta, &spec)), nil
}

// checkPodSecurity: the controller and the gateways (the default templates as the controller
// renders them) run under Pod Security "restricted"; the agent needs "privileged" (host
// network, NET_ADMIN), which deploy/README.md tells users to label the install namespace with.
func checkPodSecurity(v chartValues, objs []*unstructured.Unstructured) []string {
	var problems []string
	check := func(what string, meta metav1.ObjectMeta, spec corev1.PodSpec) {
		r, err := podSecurity(psaapi.LevelRestricted, meta, spec)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", what, err))
		case !r.Allowed:
			problems = append(problems, fmt.Sprintf("%s violates Pod Security restricted: %s", what, r.ForbiddenReason()))
		}
	}
	for _, u := range objs {
		if u.GetKind() != "Deployment" {
			continue
		}
		d, err := as[appsv1.Deployment](u)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		check("Deployment "+d.Name, d.Spec.Template.ObjectMeta, d.Spec.Template.Spec)
	}
	for _, t := range []struct {
		kind, name string
		server     bool
	}{{"WgGatewayServerTemplate", "wireguard-server", true}, {"WgGatewayClientTemplate", "wireguard-client", false}} {
		u := find(objs, t.kind, t.name)
		if u == nil {
			continue // checkGatewayTemplates reports it
		}
		rd, err := renderGateway(u, v, t.server)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", t.name, err))
			continue
		}
		check("the gateway of "+t.name, rd.Deployment.Template.ObjectMeta, rd.Deployment.Template.Spec)
	}
	for _, u := range objs {
		if u.GetKind() != "DaemonSet" {
			continue
		}
		ds, err := as[appsv1.DaemonSet](u)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		// The agent is privileged by nature; the check keeps the documentation honest: it must
		// not pass baseline either, or the README's advice would be wider than needed.
		if r, err := podSecurity(psaapi.LevelBaseline, ds.Spec.Template.ObjectMeta, ds.Spec.Template.Spec); err == nil && r.Allowed {
			problems = append(problems, "DaemonSet "+ds.Name+" passes Pod Security baseline: deploy/README.md asks for privileged")
		}
	}
	return problems
}

// TestExamplesPodSecurity: the example gateway templates users copy pass "restricted" too.
func TestExamplesPodSecurity(t *testing.T) {
	defaults, err := readValues(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := decodeValues(defaults)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join("..", "examples", "networking", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	checked := 0
	for _, f := range files {
		m, err := readValues(f)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		server := u.GetKind() == "WgGatewayServerTemplate"
		if !server && u.GetKind() != "WgGatewayClientTemplate" {
			continue
		}
		rd, err := renderGateway(u, v, server)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		r, err := podSecurity(psaapi.LevelRestricted, rd.Deployment.Template.ObjectMeta, rd.Deployment.Template.Spec)
		if err != nil || !r.Allowed {
			t.Errorf("%s violates Pod Security restricted: %v %s", f, err, r.ForbiddenReason())
		}
		checked++
	}
	if checked == 0 {
		t.Error("no gateway template among the examples")
	}
}
