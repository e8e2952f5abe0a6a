package controller_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/internal/apitest"
)

// setTemplateReplicas edits the replicas of ns's wireguard-server template.
func setTemplateReplicas(t *testing.T, c client.Client, ns string, replicas int) {
	t.Helper()
	ctx := context.Background()
	tmpl := &netv1alpha1.WgGatewayServerTemplate{}
	apitest.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "wireguard-server"}, tmpl))
	var tree map[string]any
	apitest.Must(t, json.Unmarshal(tmpl.Spec.Template.Raw, &tree))
	dig(tree, "spec", "deployment")["replicas"] = replicas
	raw, err := json.Marshal(tree)
	apitest.Must(t, err)
	tmpl.Spec.Template.Raw = raw
	apitest.Must(t, c.Update(ctx, tmpl))
}

// TestGatewayDisruptionBudget: a gateway rendered with more than one replica gets a
// PodDisruptionBudget (minAvailable 1) over its pods; back to one replica, it is removed.
func TestGatewayDisruptionBudget(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "pdb")
	ctx := context.Background()
	installTemplates(t, c, ns)
	setTemplateReplicas(t, c, ns, 2)
	stop := startGateways(t, env)
	defer stop()
	gs := serverGateway(ns, "server")
	apitest.Must(t, c.Create(ctx, gs))
	pdb := &policyv1.PodDisruptionBudget{}
	key := client.ObjectKeyFromObject(gs)
	apitest.Eventually(t, "a PodDisruptionBudget for the two replicas", 30*time.Second, func() bool {
		return c.Get(ctx, key, pdb) == nil && pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.IntValue() == 1 &&
			pdb.Spec.Selector != nil && pdb.Spec.Selector.MatchLabels["networking.liqo.io/gateway"] == "server"
	})
	setTemplateReplicas(t, c, ns, 1)
	apitest.Eventually(t, "the PodDisruptionBudget gone with one replica", 30*time.Second, func() bool {
		return c.Get(ctx, key, &policyv1.PodDisruptionBudget{}) != nil
	})
}
