package controller

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/internal/apitest"
)

// TestConfigurationStatusKeepsOthersConditions: the Configuration reconciler's status write,
// made from a copy read before the import wrote ServicesWithinBudget (an informer a moment
// behind), does not erase that condition: it fails on the stale copy, and the retry, from the
// current object, keeps it.
func TestConfigurationStatusKeepsOthersConditions(t *testing.T) {
	env := apitest.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "conf-status")
	conf := &netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: "peer", Namespace: ns, Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "p"}},
		Spec: netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.244.0.0/16", External: "10.70.0.0/16"}}}}
	apitest.Must(t, env.Client.Create(ctx, conf))
	stale := conf.DeepCopy() // what the reconciler read

	budget := metav1.Condition{Type: ConditionServicesWithinBudget, Status: metav1.ConditionFalse, Reason: ReasonOverBudget, Message: "over", LastTransitionTime: metav1.Now()}
	apitest.Must(t, applyStatusAs(ctx, env.Client, conf, budgetFieldOwner, map[string]any{"conditions": []metav1.Condition{budget}}))

	r := &ConfigurationReconciler{Client: env.Client}
	before := stale.DeepCopy()
	meta.SetStatusCondition(&stale.Status.Conditions, metav1.Condition{Type: netv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "NoRemapNeeded", Message: "m"})
	err := r.patchStatus(ctx, before, stale)
	if err == nil {
		var now netv1alpha1.Configuration
		apitest.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(conf), &now))
		if meta.FindStatusCondition(now.Status.Conditions, ConditionServicesWithinBudget) == nil {
			t.Fatalf("a status write from a stale copy erased %s: %+v", ConditionServicesWithinBudget, now.Status.Conditions)
		}
		return
	}
	if !apierrors.IsConflict(err) {
		t.Fatalf("stale write: %v, want a conflict", err)
	}
	// The retry (the reconciler's next run reads the current object).
	var cur netv1alpha1.Configuration
	apitest.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(conf), &cur))
	before = cur.DeepCopy()
	meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: netv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "NoRemapNeeded", Message: "m"})
	apitest.Must(t, r.patchStatus(ctx, before, &cur))
	var now netv1alpha1.Configuration
	apitest.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(conf), &now))
	if meta.FindStatusCondition(now.Status.Conditions, ConditionServicesWithinBudget) == nil || meta.FindStatusCondition(now.Status.Conditions, netv1alpha1.ConditionReady) == nil {
		t.Errorf("conditions after the retry: %+v", now.Status.Conditions)
	}
}
