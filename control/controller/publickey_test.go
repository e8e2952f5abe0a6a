package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/control/gateway"
	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/internal/apitest"
)

func TestPublicKeys(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "keys")
	ctx := context.Background()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: crconfig.Controller{SkipNameValidation: &skipNameValidation}}) // the package's tests run every reconciler, some more than once, in one process
	if err != nil {
		t.Fatal(err)
	}
	if err := (&controller.PublicKeyReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() { cancel(); <-done }()

	k, _ := config.GenerateKey()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gw-wg-key", Namespace: ns},
		Data: map[string][]byte{config.SecretPrivateKey: []byte(k.String())}}
	pk, err := gateway.PeerPublicKey(secret, "cluster-a", ns)
	if err != nil {
		t.Fatal(err)
	}
	if pk.Spec.PublicKey != k.Public().String() || pk.Labels[netv1alpha1.RemoteClusterIDLabel] != "cluster-a" {
		t.Errorf("generated %+v", pk)
	}
	if err := c.Create(ctx, pk); err != nil {
		t.Fatalf("the API server refused the generated PublicKey: %v", err)
	}
	dup := pk.DeepCopy()
	dup.ObjectMeta = metav1.ObjectMeta{Name: "second", Namespace: ns, Labels: pk.Labels}
	apitest.Must(t, c.Create(ctx, dup))
	unlabelled := pk.DeepCopy()
	unlabelled.ObjectMeta = metav1.ObjectMeta{Name: "unlabelled", Namespace: ns}
	apitest.Must(t, c.Create(ctx, unlabelled))

	want := map[string]string{pk.Name: "Valid", "second": "DuplicateClusterID", "unlabelled": "MissingClusterID"}
	for name, reason := range want {
		got := &netv1alpha1.PublicKey{}
		apitest.Eventually(t, name+": a Ready condition with reason "+reason, 20*time.Second, func() bool {
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, got); err != nil {
				return false
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, netv1alpha1.ConditionReady)
			return cond != nil && cond.Reason == reason
		}, func() string { return fmt.Sprintf("status: %+v", got.Status) })
	}
	if _, err := gateway.PeerPublicKey(&corev1.Secret{}, "x", ns); err == nil || !strings.Contains(err.Error(), "not a WireGuard key") {
		t.Errorf("empty secret: %v", err)
	}
}
