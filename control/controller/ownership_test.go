package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/internal/apitest"
)

// TestForeignObjectsLeftAlone: objects of a gateway's names that skein-controller did not
// create are neither taken over nor deleted. A user's Service "web" beside GatewayServer "web"
// keeps its port and selector and the gateway says Conflict; deleting GatewayServer "victim"
// leaves the Deployment, Service, ServiceAccount, RoleBinding and Secret "victim" that were
// there before it.
func TestForeignObjectsLeftAlone(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "foreign")
	ctx := context.Background()
	installTemplates(t, c, ns)

	labels := map[string]string{"app": "web"}
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: corev1.ServiceSpec{Selector: labels,
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	apitest.Must(t, c.Create(ctx, web))
	meta0 := metav1.ObjectMeta{Name: "victim", Namespace: ns}
	foreign := []client.Object{
		&appsv1.Deployment{ObjectMeta: meta0, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}}},
		&corev1.Service{ObjectMeta: meta0, Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80}}}},
		&corev1.ServiceAccount{ObjectMeta: meta0},
		&rbacv1.RoleBinding{ObjectMeta: meta0, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "victim", Namespace: ns}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "victim-wg-key", Namespace: ns}, StringData: map[string]string{"password": "hunter2"}},
		// A key planted before the gateway, labelled as skein's (so in the controller's cache)
		// but not owned by it.
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "planted-wg-key", Namespace: ns, Labels: map[string]string{controller.ManagedByLabel: controller.FieldOwner}},
			StringData: map[string]string{"privateKey": "GExyYe7RJ3Lo5nQVa6K2Tp9zobXCvWmJawsLxu7hn10=", "publicKey": "GExyYe7RJ3Lo5nQVa6K2Tp9zobXCvWmJawsLxu7hn10="}},
	}
	for _, o := range foreign {
		apitest.Must(t, c.Create(ctx, o))
	}

	stop := startGateways(t, env)
	defer stop()
	for _, name := range []string{"web", "victim", "planted"} {
		apitest.Must(t, c.Create(ctx, serverGateway(ns, name)))
	}
	reason := func(name string) string {
		gs := &netv1alpha1.GatewayServer{}
		if c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, gs) != nil {
			return ""
		}
		if cond := meta.FindStatusCondition(gs.Status.Conditions, netv1alpha1.ConditionReady); cond != nil && cond.Status == metav1.ConditionFalse {
			return cond.Reason + ": " + cond.Message
		}
		return ""
	}
	apitest.Eventually(t, "GatewayServer web reports the Service in its way", 30*time.Second, func() bool {
		return strings.HasPrefix(reason("web"), "Conflict: Service "+ns+"/web exists and does not belong to this gateway")
	})
	apitest.Eventually(t, "GatewayServer victim reports the Secret in its way", 30*time.Second, func() bool {
		return strings.HasPrefix(reason("victim"), "SecretConflict")
	})
	apitest.Eventually(t, "GatewayServer planted refuses the planted key", 30*time.Second, func() bool {
		return strings.HasPrefix(reason("planted"), "SecretConflict")
	})
	got := &corev1.Service{}
	apitest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(web), got))
	if len(got.Spec.Ports) != 1 || got.Spec.Ports[0].Port != 80 || got.Spec.Ports[0].Protocol != corev1.ProtocolTCP || got.Spec.Selector["app"] != "web" || len(got.OwnerReferences) != 0 {
		t.Errorf("the user's Service web was changed: %+v %v", got.Spec, got.OwnerReferences)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Deployment web was written beside the conflict: %v", err)
	}

	// Deleting the gateways deletes nothing of the user's.
	for _, name := range []string{"web", "victim", "planted"} {
		apitest.Must(t, c.Delete(ctx, serverGateway(ns, name)))
	}
	apitest.Eventually(t, "both GatewayServers gone", 30*time.Second, func() bool {
		var list netv1alpha1.GatewayServerList
		return c.List(ctx, &list, client.InNamespace(ns)) == nil && len(list.Items) == 0
	})
	for _, o := range append(foreign, web) {
		fresh := o.DeepCopyObject().(client.Object)
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), fresh); err != nil || !fresh.GetDeletionTimestamp().IsZero() {
			t.Errorf("%T %s: %v (deleting: %v)", o, o.GetName(), err, err == nil && !fresh.GetDeletionTimestamp().IsZero())
		}
	}
}
