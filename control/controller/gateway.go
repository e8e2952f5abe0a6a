// The gateway reconciler reconciles GatewayServers and GatewayClients: it renders the referenced
// template into the gateway's Deployment (and, for a server, its Service), ServiceAccount and
// RoleBinding, generates the WireGuard key pair once into a Secret, assigns the gateway's
// overlay address, and fills the status (secretRef, internalEndpoint.ip, and for a server the
// endpoint the peer connects to). Everything it creates is removed with the gateway.

package controller

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller/render"
	"github.com/skein-net/skein/control/gateway/config"
)

const (
	gatewayFinalizer = "networking.liqo.io/gateway-resources"
	// GatewayClusterRole is the ClusterRole (shipped by the chart) bound to every gateway's
	// ServiceAccount in its namespace: read its objects, write its status, Connection and Lease.
	GatewayClusterRole = "skein-gateway"
	// GatewayNodesClusterRole is bound cluster-wide: read Nodes and InternalNodes.
	GatewayNodesClusterRole = "skein-gateway-nodes"
	// GatewayPodsClusterRole (read every Pod) is bound only to gateways whose pods run with
	// --watch-pods.
	GatewayPodsClusterRole = "skein-gateway-pods"
)

// GatewayReconciler handles one kind of gateway.
type GatewayReconciler struct {
	Client client.Client
	// Reader reads around the cache (nil: Client), for objects the scoped cache does not hold.
	Reader  client.Reader
	Overlay *OverlayAddresses
	// Server selects GatewayServers (true) or GatewayClients.
	Server bool
	// Events, if set, receives a warning for every failed reconcile.
	Events events.EventRecorder
	// AllowPrivileged lets templates render privileged gateway pods (podpolicy.go).
	AllowPrivileged bool
	// PodRoutes decides whether gateways watch Pods (podroutes.go); nil: they do not.
	PodRoutes *PodRoutes
	// Policy is what templates may choose (gatewaypolicy.go); the zero value is the default.
	Policy GatewayPolicy

	// applied remembers, per object, what was last applied and what the API server answered
	// (see applyChanged).
	applied sync.Map // appliedKey -> appliedRecord
}

// gatewayWorkers is how many gateways of a kind are reconciled at once.
const gatewayWorkers = 4

type appliedKey struct {
	gvk       schema.GroupVersionKind
	namespace string
	name      string
}

// appliedRecord is an object as this controller last applied it: the hash of what it sent and
// the object's UID and resourceVersion in the API server's answer.
type appliedRecord struct {
	hash  [sha256.Size]byte
	uid   types.UID
	rv    string
	owner types.NamespacedName // the gateway the object belongs to
}

// SetupWithManager registers the reconciler, watching what it creates.
func (r *GatewayReconciler) SetupWithManager(mgr ctrl.Manager) error {
	// Gateways are independent of each other: what they share (overlay addresses, pod routes,
	// the applied records) is locked, and controller-runtime never runs two reconciles of one
	// gateway at once. A reconcile is mostly waiting for the API server, so several at a time
	// bring many peerings up sooner (1,000 at once: BenchmarkPeerings1000).
	b := ctrl.NewControllerManagedBy(mgr).WithOptions(crcontroller.Options{MaxConcurrentReconciles: gatewayWorkers}).
		Owns(&appsv1.Deployment{}).Owns(&corev1.Secret{}).Owns(&policyv1.PodDisruptionBudget{})
	// The active pod's node decides a NodePort server's endpoint; a pod's address and node may
	// turn pod routes on (podroutes.go).
	byPod := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if gw := o.GetLabels()[GatewayPodLabel]; gw != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: gw}}}
		}
		return nil
	})
	if r.PodRoutes != nil {
		b = b.WatchesRawSource(source.Channel(r.PodRoutes.Subscribe(r.Server), &handler.EnqueueRequestForObject{}))
	}
	if r.Server {
		return b.For(&netv1alpha1.GatewayServer{}).Owns(&corev1.Service{}).Watches(&corev1.Pod{}, byPod).
			Watches(&netv1alpha1.WgGatewayServerTemplate{}, handler.EnqueueRequestsFromMapFunc(r.usersOf)).Named("gatewayserver").Complete(r)
	}
	return b.For(&netv1alpha1.GatewayClient{}).Watches(&corev1.Pod{}, byPod).
		Watches(&netv1alpha1.WgGatewayClientTemplate{}, handler.EnqueueRequestsFromMapFunc(r.usersOf)).Named("gatewayclient").Complete(r)
}

// usersOf maps a template to the gateways of this reconciler's kind that reference it, so that
// a template edit rolls out to them.
func (r *GatewayReconciler) usersOf(ctx context.Context, tmpl client.Object) []reconcile.Request {
	uses := func(ref netv1alpha1.TemplateRef, gwNamespace string) bool {
		ns := ref.Namespace
		if ns == "" {
			ns = gwNamespace
		}
		return ref.Name == tmpl.GetName() && ns == tmpl.GetNamespace()
	}
	var reqs []reconcile.Request
	if r.Server {
		var list netv1alpha1.GatewayServerList
		if err := r.Client.List(ctx, &list); err != nil {
			return nil
		}
		for _, g := range list.Items {
			if g.Spec.ServerTemplateRef.Kind == "WgGatewayServerTemplate" && uses(g.Spec.ServerTemplateRef, g.Namespace) {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: g.Namespace, Name: g.Name}})
			}
		}
		return reqs
	}
	var list netv1alpha1.GatewayClientList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	for _, g := range list.Items {
		if g.Spec.ClientTemplateRef.Kind == "WgGatewayClientTemplate" && uses(g.Spec.ClientTemplateRef, g.Namespace) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: g.Namespace, Name: g.Name}})
		}
	}
	return reqs
}

// gateway abstracts over the two kinds.
type gatewayObject struct {
	obj       client.Object
	spec      any
	ref       netv1alpha1.TemplateRef
	status    *netv1alpha1.InternalEndpoint
	secretRef **netv1alpha1.ObjectRef
	conds     *[]metav1.Condition
	kind      string
	server    *netv1alpha1.GatewayServer
}

func (r *GatewayReconciler) get(ctx context.Context, key types.NamespacedName) (*gatewayObject, error) {
	if r.Server {
		g := &netv1alpha1.GatewayServer{}
		if err := r.Client.Get(ctx, key, g); err != nil {
			return nil, err
		}
		if g.Status.InternalEndpoint == nil {
			g.Status.InternalEndpoint = &netv1alpha1.InternalEndpoint{}
		}
		return &gatewayObject{obj: g, spec: g.Spec, ref: g.Spec.ServerTemplateRef, status: g.Status.InternalEndpoint, secretRef: &g.Status.SecretRef,
			conds: &g.Status.Conditions, kind: "GatewayServer", server: g}, nil
	}
	g := &netv1alpha1.GatewayClient{}
	if err := r.Client.Get(ctx, key, g); err != nil {
		return nil, err
	}
	if g.Status.InternalEndpoint == nil {
		g.Status.InternalEndpoint = &netv1alpha1.InternalEndpoint{}
	}
	return &gatewayObject{obj: g, spec: g.Spec, ref: g.Spec.ClientTemplateRef, status: g.Status.InternalEndpoint, secretRef: &g.Status.SecretRef,
		conds: &g.Status.Conditions, kind: "GatewayClient"}, nil
}

// Reconcile brings one gateway's resources and status in line.
func (r *GatewayReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	g, err := r.get(ctx, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	obj := g.obj
	key := GatewayKey(obj.GetNamespace(), obj.GetName())
	if !obj.GetDeletionTimestamp().IsZero() {
		if err := r.removeAll(ctx, obj); err != nil {
			return ctrl.Result{}, err
		}
		r.Overlay.Release(key)
		if controllerutil.RemoveFinalizer(obj, gatewayFinalizer) {
			return ctrl.Result{}, r.Client.Update(ctx, obj)
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(obj, gatewayFinalizer) {
		// The update is an event of its own: the next pass starts from the stored object.
		return ctrl.Result{}, r.Client.Update(ctx, obj)
	}
	before := obj.DeepCopyObject().(client.Object)

	// Keys: generated once, never rotated.
	secretName := config.KeySecretName(obj.GetName())
	if err := r.ensureKeys(ctx, obj, secretName); err != nil {
		var conflict *conflictError
		if errors.As(err, &conflict) {
			return ctrl.Result{}, r.fail(ctx, g, before, "SecretConflict", err.Error())
		}
		return ctrl.Result{}, err
	}
	*g.secretRef = &netv1alpha1.ObjectRef{Name: secretName, Namespace: obj.GetNamespace()}

	// Overlay address.
	ip, err := r.Overlay.Assign(ctx, key)
	if err != nil {
		return ctrl.Result{}, r.fail(ctx, g, before, "OverlayAddressExhausted", err.Error())
	}
	ovIP := netv1alpha1.IP(ip.String())
	g.status.IP = &ovIP

	// Render and apply the template.
	rendered, err := r.render(ctx, g, secretName)
	if err != nil {
		return ctrl.Result{}, r.fail(ctx, g, before, "TemplateError", err.Error())
	}
	if bad := constrainPod(&rendered.Deployment.Template.Spec, obj.GetName(), secretName, r.AllowPrivileged); bad != "" {
		return ctrl.Result{}, r.fail(ctx, g, before, "ForbiddenPodSpec", fmt.Sprintf(
			"the template %s %s asks for %s in the gateway pod, which skein-controller does not render (the gateway runs unprivileged; "+
				"--allow-privileged-gateways allows it)", g.ref.Kind, g.ref.Name, bad))
	}
	if bad := r.Policy.constrainGateway(rendered, obj.GetName(), obj.GetNamespace(), r.Server, g.server); len(bad) > 0 {
		// What an earlier template (or an earlier controller, without the policy) rendered
		// does not stay behind: the gateway's Deployment, Service, disruption budget and Pods
		// binding go until the template is fixed. Its key, ServiceAccount and overlay address stay.
		if err := r.removeRendered(ctx, obj); err != nil {
			return ctrl.Result{}, err
		}
		// No pod holds the address the active replica published any more: the nodes must stop
		// sending the peering's traffic there and admitting the overlay's frames from it (the
		// pod network gives it to the next pod; found by the fourth attack review). The
		// overlay IP, which the controller assigns, stays.
		g.status.VTEP, g.status.Node, g.status.NodeVTEP = nil, nil, nil
		return ctrl.Result{}, r.fail(ctx, g, before, "ForbiddenTemplate", fmt.Sprintf(
			"the template %s %s asks for what skein-controller does not render for a template (the install's settings decide it; "+
				"the gateway's Deployment and Service are removed until the template is fixed): %s",
			g.ref.Kind, g.ref.Name, strings.Join(bad, "; ")))
	}
	if err := r.observePods(ctx, obj); err != nil {
		return ctrl.Result{}, err
	}
	r.PodRoutes.Apply(&rendered.Deployment.Template.Spec)
	if err := r.apply(ctx, obj, rendered); err != nil {
		var conflict *conflictError
		if errors.As(err, &conflict) {
			return ctrl.Result{}, r.fail(ctx, g, before, "Conflict", err.Error())
		}
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			// The API server refused what the template rendered (a field it does not accept,
			// an admission policy): the template must change; say so where users look.
			return ctrl.Result{}, r.fail(ctx, g, before, "RenderedObjectRefused", err.Error())
		}
		return ctrl.Result{}, err
	}
	msg := "deployed"
	if g.server != nil {
		ep, why, err := r.endpoint(ctx, g.server)
		if err != nil {
			return ctrl.Result{}, err
		}
		g.server.Status.Endpoint = ep
		if ep == nil {
			msg = "deployed; waiting for an endpoint: " + why
		}
	}
	meta.SetStatusCondition(g.conds, metav1.Condition{Type: netv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Deployed", Message: msg, ObservedGeneration: obj.GetGeneration()})
	if equality.Semantic.DeepEqual(before, obj) {
		return ctrl.Result{}, nil // an empty patch is still a request
	}
	return ctrl.Result{}, r.Client.Status().Patch(ctx, obj, client.MergeFrom(before))
}

func (r *GatewayReconciler) fail(ctx context.Context, g *gatewayObject, before client.Object, reason, msg string) error {
	if r.Events != nil {
		r.Events.Eventf(g.obj, nil, corev1.EventTypeWarning, reason, "Deploy", "%s", msg)
	}
	meta.SetStatusCondition(g.conds, metav1.Condition{Type: netv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: g.obj.GetGeneration()})
	return r.Client.Status().Patch(ctx, g.obj, client.MergeFrom(before))
}

func (r *GatewayReconciler) ensureKeys(ctx context.Context, owner client.Object, name string) error {
	key := types.NamespacedName{Namespace: owner.GetNamespace(), Name: name}
	s := &corev1.Secret{}
	err := r.Client.Get(ctx, key, s)
	if err == nil {
		// In the cache means labelled as skein's, which anyone who can write Secrets here can
		// do: the key is the gateway's only if the gateway controls the Secret.
		if !metav1.IsControlledBy(s, owner) {
			return &conflictError{fmt.Sprintf("secret %s/%s exists and does not belong to this gateway: skein does not take over objects it did not create (nor a key someone planted); remove or rename it", key.Namespace, key.Name)}
		}
		if len(s.Data[config.SecretPrivateKey]) == 0 {
			return fmt.Errorf("secret %s/%s exists without %s; delete it to generate a new key pair", owner.GetNamespace(), name, config.SecretPrivateKey)
		}
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return err
	}
	k, err := config.GenerateKey()
	if err != nil {
		return err
	}
	s = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: owner.GetNamespace(), Name: name, Labels: withManagedBy(owner.GetLabels())},
		Data:       map[string][]byte{config.SecretPrivateKey: []byte(k.String()), config.SecretPublicKey: []byte(k.Public().String())},
	}
	if err := controllerutil.SetControllerReference(owner, s, r.Client.Scheme()); err != nil {
		return err
	}
	err = r.Client.Create(ctx, s)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	// It exists but the cache does not hold it: a Secret from before the cache was scoped (no
	// ManagedByLabel yet), or someone else's. Ours gets the label; another's is left alone.
	reader := r.Reader
	if reader == nil {
		reader = r.Client
	}
	existing := &corev1.Secret{}
	if err := reader.Get(ctx, key, existing); err != nil {
		return err
	}
	if !metav1.IsControlledBy(existing, owner) {
		return &conflictError{fmt.Sprintf("secret %s/%s exists and does not belong to this gateway: skein does not take over objects it did not create; remove or rename it", key.Namespace, key.Name)}
	}
	patch := client.MergeFrom(existing.DeepCopy())
	metav1.SetMetaDataLabel(&existing.ObjectMeta, ManagedByLabel, FieldOwner)
	return r.Client.Patch(ctx, existing, patch)
}

func (r *GatewayReconciler) render(ctx context.Context, g *gatewayObject, secretName string) (*render.Rendered, error) {
	ref := g.ref
	ns := ref.Namespace
	if ns == "" {
		ns = g.obj.GetNamespace()
	}
	var raw *netv1alpha1.GatewayTemplateSpec
	switch ref.Kind {
	case "WgGatewayServerTemplate":
		t := &netv1alpha1.WgGatewayServerTemplate{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, t); err != nil {
			return nil, fmt.Errorf("template %s %s/%s: %w", ref.Kind, ns, ref.Name, err)
		}
		raw = &t.Spec
	case "WgGatewayClientTemplate":
		t := &netv1alpha1.WgGatewayClientTemplate{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, t); err != nil {
			return nil, fmt.Errorf("template %s %s/%s: %w", ref.Kind, ns, ref.Name, err)
		}
		raw = &t.Spec
	default:
		return nil, fmt.Errorf("template kind %q is not one this controller renders (WgGatewayServerTemplate, WgGatewayClientTemplate)", ref.Kind)
	}
	d, err := render.NewData(g.obj.GetName(), g.obj.GetNamespace(), g.obj.GetLabels()[netv1alpha1.RemoteClusterIDLabel], secretName, string(g.obj.GetUID()), g.spec)
	if err != nil {
		return nil, err
	}
	rendered, err := render.Render(raw.Template, d)
	if err != nil {
		return nil, fmt.Errorf("template %s %s/%s: %w", ref.Kind, ns, ref.Name, err)
	}
	if g.server != nil && rendered.Service == nil {
		return nil, fmt.Errorf("template %s %s/%s renders no service for a GatewayServer", ref.Kind, ns, ref.Name)
	}
	return rendered, nil
}

// conflictError is an object in the way that the controller does not own and will not take.
type conflictError struct{ msg string }

func (e *conflictError) Error() string { return e.msg }

// PartOfLabel, set to PartOf, marks every skein pod (the chart's PodMonitor selects it).
const (
	PartOfLabel = "app.kubernetes.io/part-of"
	PartOf      = "skein"
)

// FieldOwner is the field manager of everything skein-controller applies.
const FieldOwner = "skein-controller"

// apply brings the rendered objects in line with server-side apply: the controller owns the
// fields it renders and nothing else, so what other controllers add (the Deployment
// controller's revision annotation, a load-balancer controller's annotations, defaults of the
// API server and of webhooks) stays, and an unchanged template writes nothing.
func (r *GatewayReconciler) apply(ctx context.Context, owner client.Object, rd *render.Rendered) error {
	name, ns := owner.GetName(), owner.GetNamespace()
	labels := withManagedBy(rd.Labels)
	// Every gateway pod carries the label skein's PodMonitor selects, whatever its template.
	if rd.Deployment.Template.Labels == nil {
		rd.Deployment.Template.Labels = map[string]string{}
	}
	rd.Deployment.Template.Labels[PartOfLabel] = PartOf
	subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}
	// The ServiceAccount names its gateway in GatewayPodLabel: the chart's admission policy
	// finds the gateways' accounts by it and holds each to its own gateway's pods.
	saLabels := withManagedBy(labels)
	saLabels[GatewayPodLabel] = name
	own := GatewayRoleName(name)
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: saLabels}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: GatewayClusterRole}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: own, Namespace: ns, Labels: labels}, Rules: gatewayOwnRules(name)},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: own, Namespace: ns, Labels: labels}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: own}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: rd.Annotations}, Spec: *rd.Deployment},
	}
	if rd.Service != nil {
		// Built from the GatewayServer's spec (GatewayPolicy.service).
		objs = append(objs, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: rd.Annotations}, Spec: *rd.Service})
	}
	// With more than one replica, a voluntary disruption (a node drain) keeps one running. It
	// covers the gateway's own pods, whatever the template says.
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if rd.Deployment.Replicas != nil && *rd.Deployment.Replicas > 1 {
		one := intstr.FromInt32(1)
		pdb.Labels = labels
		pdb.Spec = policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: gatewaySelector(name)}
		objs = append(objs, pdb)
	} else if err := r.deleteObsolete(ctx, owner, pdb); err != nil {
		return err
	}
	// Cluster-scoped reads need ClusterRoleBindings; a namespaced gateway cannot own them, so
	// removeAll deletes them. Every Pod of the cluster only for a gateway that watches them.
	crbs := []*rbacv1.ClusterRoleBinding{{ObjectMeta: metav1.ObjectMeta{Name: clusterBindingName(ns, name), Labels: labels},
		Subjects: subjects, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: GatewayNodesClusterRole}}}
	pods := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: clusterBindingName(ns, name) + "-pods"}}
	if watchesPods(&rd.Deployment.Template.Spec) {
		pods.Labels, pods.Subjects = labels, subjects
		pods.RoleRef = rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: GatewayPodsClusterRole}
		crbs = append(crbs, pods)
	} else if err := r.deleteObsolete(ctx, owner, pods); err != nil {
		return err
	}
	// Nothing is written while anything of the gateway's names belongs to someone else.
	claims := slices.Clone(objs)
	for _, crb := range crbs {
		claims = append(claims, crb)
	}
	for _, obj := range claims {
		if err := r.claim(ctx, owner, obj); err != nil {
			return err
		}
	}
	for _, obj := range objs {
		if err := controllerutil.SetControllerReference(owner, obj, r.Client.Scheme()); err != nil {
			return err
		}
		if err := r.applyChanged(ctx, owner, obj); err != nil {
			return err
		}
	}
	for _, crb := range crbs {
		if err := r.applyChanged(ctx, owner, crb); err != nil {
			return err
		}
	}
	// The names before they were made unambiguous (legacyClusterBindingName), left by an
	// older controller: removed, once the new ones are in place, when they are this gateway's.
	for _, legacy := range []string{legacyClusterBindingName(ns, name), legacyClusterBindingName(ns, name) + "-pods"} {
		if err := r.deleteObsolete(ctx, owner, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: legacy}}); err != nil {
			return err
		}
	}
	return nil
}

// applyChanged server-side applies obj unless nothing can have changed since this controller
// last applied it: the same content as then, and the cached object still the one the API
// server answered then (same UID and resourceVersion, so nobody, not even a status writer,
// has touched it since). Every reconcile renders all of a gateway's objects, and a gateway is
// reconciled several times as it comes up (its finalizer, its Service, its pods, its status);
// applying each object every time made 1,000 peerings cost the API server some 30,000 writes
// that changed nothing. An object someone else changed is applied again, which repairs it.
func (r *GatewayReconciler) applyChanged(ctx context.Context, owner, obj client.Object) error {
	key, err := r.appliedKeyOf(obj)
	if err != nil {
		return err
	}
	content, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	hash := sha256.Sum256(content)
	if v, ok := r.applied.Load(key); ok && v.(appliedRecord).hash == hash {
		rec := v.(appliedRecord)
		if existing, err := r.fromCache(ctx, obj); err == nil && existing != nil &&
			existing.GetUID() == rec.uid && existing.GetResourceVersion() == rec.rv {
			return nil
		}
	}
	u, err := apply(ctx, r.Client, obj)
	if err != nil {
		r.applied.Delete(key)
		return err
	}
	r.applied.Store(key, appliedRecord{hash: hash, uid: u.GetUID(), rv: u.GetResourceVersion(),
		owner: types.NamespacedName{Namespace: owner.GetNamespace(), Name: owner.GetName()}})
	return nil
}

// appliedKeyOf is obj's key in the applied records.
func (r *GatewayReconciler) appliedKeyOf(obj client.Object) (appliedKey, error) {
	gvk, err := apiutil.GVKForObject(obj, r.Client.Scheme())
	return appliedKey{gvk, obj.GetNamespace(), obj.GetName()}, err
}

// deleteObsolete deletes obj's namesake if it is owner's: an object the gateway no longer
// renders (its PodDisruptionBudget once it runs one replica, its pods ClusterRoleBinding once it
// no longer watches pods). It reads the API server only when this controller applied the object
// and the cache may not have caught up yet: everything the controller creates carries
// ManagedByLabel, so the cache holds it, and a miss otherwise means there is nothing to delete.
// (With deleteIfOwned here, every reconcile of every gateway read both from the API server:
// 4,000 reads for 1,000 peerings coming up.) removeAll, which must leave nothing, reads around
// the cache.
func (r *GatewayReconciler) deleteObsolete(ctx context.Context, owner, obj client.Object) error {
	key, err := r.appliedKeyOf(obj)
	if err != nil {
		return err
	}
	_, applied := r.applied.Load(key)
	existing, err := r.fromCache(ctx, obj)
	if err != nil || (existing == nil && !applied) {
		return err
	}
	if err := r.deleteIfOwned(ctx, owner, obj); err != nil {
		return err
	}
	r.applied.Delete(key)
	return nil
}

// forgetApplied drops the applied records of owner's objects (owner is being deleted), so the
// records do not grow with gateway churn over the controller's lifetime.
func (r *GatewayReconciler) forgetApplied(owner client.Object) {
	o := types.NamespacedName{Namespace: owner.GetNamespace(), Name: owner.GetName()}
	r.applied.Range(func(k, v any) bool {
		if v.(appliedRecord).owner == o {
			r.applied.Delete(k)
		}
		return true
	})
}

// observePods shows the gateway's running pods and their nodes to PodRoutes, and says so in an
// event on the gateway when one of them turns pod routes on.
func (r *GatewayReconciler) observePods(ctx context.Context, obj client.Object) error {
	if r.PodRoutes == nil || r.PodRoutes.Mode != PodRoutesAuto || r.PodRoutes.Evidence() != "" {
		return nil
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(obj.GetNamespace()), client.MatchingLabels{GatewayPodLabel: obj.GetName()}); err != nil {
		return err
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Spec.NodeName == "" || pod.Status.PodIP == "" || !gatewayPod(pod, obj.GetName()) {
			continue
		}
		node := &corev1.Node{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return err
		}
		if why := r.PodRoutes.Observe(pod, node); why != "" {
			ctrl.LoggerFrom(ctx).Info("gateways route local pods from Pod objects from now on", "why", why)
			if r.Events != nil {
				r.Events.Eventf(obj, nil, corev1.EventTypeNormal, "PodRoutes", "Deploy",
					"%s: the CNI does not keep pods inside Node.spec.podCIDRs, so gateways learn each pod's node from the Pod objects (--watch-pods)", why)
			}
			// Every other gateway is rendered again with --watch-pods.
			return r.PodRoutes.Broadcast(ctx, r.Client)
		}
	}
	return nil
}

// activePodLabel marks the active gateway replica's pod (control/gateway.ActiveLabel; the
// controller does not import the gateway's package).
const activePodLabel = "networking.liqo.io/active"

// watchesPods reports whether the gateway container runs with --watch-pods.
func watchesPods(spec *corev1.PodSpec) bool {
	for _, c := range spec.Containers {
		if c.Name != "gateway" {
			continue
		}
		for _, a := range c.Args {
			if a == "--watch-pods" || a == "--watch-pods=true" || a == "-watch-pods" || a == "-watch-pods=true" {
				return true
			}
		}
	}
	return false
}

// deleteOwned deletes obj (by name) if it exists and owner controls it.

// applyObject server-side applies a typed object as FieldOwner, forcing ownership of the
// fields it sets. The object is sent without its null fields and its status: a typed Go object
// carries them (creationTimestamp: null, status: {}) though the controller never sets them.
func applyObject(ctx context.Context, c client.Client, obj client.Object) error {
	_, err := apply(ctx, c, obj)
	return err
}

// applyAndRead is applyObject that leaves in obj the object as the API server answered (its
// UID, defaulted fields).
func applyAndRead(ctx context.Context, c client.Client, obj client.Object) error {
	u, err := apply(ctx, c, obj)
	if err != nil {
		return err
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj)
}

func apply(ctx context.Context, c client.Client, obj client.Object) (*unstructured.Unstructured, error) {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	pruneNull(m)
	delete(m, "status")
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return nil, fmt.Errorf("apply %s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return u, nil
}

// pruneNull drops null values from maps, at every depth. Empty maps stay: some mean something
// (emptyDir: {}).
func pruneNull(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e == nil {
				delete(x, k)
			} else {
				x[k] = pruneNull(e)
			}
		}
	case []any:
		for i := range x {
			x[i] = pruneNull(x[i])
		}
	}
	return v
}

// endpoint computes where the peer connects: the load balancer's address, or the node of the
// active gateway pod with the node port, or the ClusterIP with the port.
func (r *GatewayReconciler) endpoint(ctx context.Context, g *netv1alpha1.GatewayServer) (*netv1alpha1.Endpoint, string, error) {
	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(g), svc); err != nil {
		return nil, "", client.IgnoreNotFound(err)
	}
	if len(svc.Spec.Ports) == 0 {
		return nil, "the service has no port", nil
	}
	port := svc.Spec.Ports[0]
	ep := &netv1alpha1.Endpoint{Protocol: netv1alpha1.Protocol(corev1.ProtocolUDP)}
	switch svc.Spec.Type {
	case corev1.ServiceTypeLoadBalancer:
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				ep.Addresses = append(ep.Addresses, netv1alpha1.Address(in.IP))
			} else if in.Hostname != "" {
				ep.Addresses = append(ep.Addresses, netv1alpha1.Address(in.Hostname))
			}
		}
		ep.Port = port.Port
		if len(ep.Addresses) == 0 {
			return nil, "the load balancer has no ingress address yet", nil
		}
	case corev1.ServiceTypeNodePort:
		addr, why, err := r.activeNodeAddress(ctx, g)
		if err != nil || addr == "" {
			return nil, why, err
		}
		ep.Addresses, ep.Port = []netv1alpha1.Address{netv1alpha1.Address(addr)}, port.NodePort
	default:
		if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			return nil, "the service has no cluster IP", nil
		}
		ep.Addresses, ep.Port = []netv1alpha1.Address{netv1alpha1.Address(svc.Spec.ClusterIP)}, port.Port
	}
	return ep, "", nil
}

// activeNodeAddress is the InternalIP (else ExternalIP) of the node running the gateway's
// active pod.
func (r *GatewayReconciler) activeNodeAddress(ctx context.Context, g *netv1alpha1.GatewayServer) (string, string, error) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(g.Namespace),
		client.MatchingLabels{"networking.liqo.io/gateway": g.Name, activePodLabel: "true"}); err != nil {
		return "", "", err
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			continue
		}
		n := &corev1.Node{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: p.Spec.NodeName}, n); err != nil {
			return "", "", client.IgnoreNotFound(err)
		}
		for _, want := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
			for _, a := range n.Status.Addresses {
				if a.Type == want {
					if _, err := netip.ParseAddr(a.Address); err == nil {
						return a.Address, "", nil
					}
				}
			}
		}
		return "", "node " + n.Name + " has no address", nil
	}
	return "", "no active gateway pod yet", nil
}

// GatewayRoleName names the Role (and its RoleBinding) that grants gateway name what is its
// alone: its key Secret, its election Lease and its Connection, by name. The ':' keeps it apart
// from every name a gateway's objects take from a gateway's name (gateway names are DNS
// subdomains, which have none), so no gateway's Role or binding is another's namesake.
func GatewayRoleName(name string) string { return GatewayClusterRole + ":" + name }

// gatewayOwnRules are the rules of gateway name's own Role: RBAC names what only that gateway
// may touch; the rest is the shared GatewayClusterRole. skein-controller holds every permission
// it grants here (RBAC's escalation check), so it needs no "escalate".
//
// The Lease's and the Connection's "create" stay in the shared role: RBAC cannot limit a create
// by name (the name is in the body). A gateway may thus create a Lease another gateway has not
// created yet, but never update it afterwards; its owner's replicas take it over once it is not
// renewed (LeaseDuration, at once when its holder names no pod of the namespace). A Connection
// made that way is put back by its gateway (spec, peer label, owner). Having the controller
// create every gateway's Lease instead would take "create" away from the gateways at the price
// of the controller listing, watching and writing every Lease of the cluster (the
// control-plane's leader locks among them).
func gatewayOwnRules(name string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{config.KeySecretName(name)}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{name}, Verbs: []string{"get", "update"}},
		{APIGroups: []string{netv1alpha1.SchemeGroupVersion.Group}, Resources: []string{"connections"}, ResourceNames: []string{name}, Verbs: []string{"get", "update"}},
		{APIGroups: []string{netv1alpha1.SchemeGroupVersion.Group}, Resources: []string{"connections/status"}, ResourceNames: []string{name}, Verbs: []string{"update"}},
		// Its own status only: a gateway publishes its endpoint and VTEP there, which every
		// node's agent routes to, so another gateway's status is another peering's traffic.
		{APIGroups: []string{netv1alpha1.SchemeGroupVersion.Group}, Resources: []string{"gatewayservers/status", "gatewayclients/status"}, ResourceNames: []string{name}, Verbs: []string{"patch"}},
	}
}

// clusterBindingName names a gateway's ClusterRoleBinding (GatewayClusterBindingName).
func clusterBindingName(ns, name string) string { return GatewayClusterBindingName(ns, name) }

// GatewayClusterBindingName names the ClusterRoleBinding of gateway ns/name (its Pods binding
// adds "-pods"): readable, and unambiguous thanks to a hash of the namespace and name, which
// "skein-gateway-<ns>-<name>" alone was not (a-b/c and a/b-c).
func GatewayClusterBindingName(ns, name string) string {
	sum := sha256.Sum256([]byte(ns + "/" + name))
	readable := ns + "-" + name
	if len(readable) > 200 {
		readable = readable[:200]
	}
	return fmt.Sprintf("skein-gateway-%s-%x", readable, sum[:5])
}

// legacyClusterBindingName is the name clusterBindingName gave before it hashed: removed on
// upgrade once it is the gateway's own (bound to its ServiceAccount, isOwned).
func legacyClusterBindingName(ns, name string) string { return "skein-gateway-" + ns + "-" + name }

// removeRendered deletes what the gateway's template rendered and the gateway's Pods binding,
// when they are the gateway's.
func (r *GatewayReconciler) removeRendered(ctx context.Context, owner client.Object) error {
	name, ns := owner.GetName(), owner.GetNamespace()
	meta := metav1.ObjectMeta{Name: name, Namespace: ns}
	var errs []error
	for _, obj := range []client.Object{
		&appsv1.Deployment{ObjectMeta: meta}, &corev1.Service{ObjectMeta: meta}, &policyv1.PodDisruptionBudget{ObjectMeta: meta},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: clusterBindingName(ns, name) + "-pods"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: legacyClusterBindingName(ns, name) + "-pods"}},
	} {
		if err := r.deleteIfOwned(ctx, owner, obj); err != nil {
			errs = append(errs, fmt.Errorf("delete %T %s/%s: %w", obj, ns, obj.GetName(), err))
		}
		if key, err := r.appliedKeyOf(obj); err == nil {
			r.applied.Delete(key)
		}
	}
	return errors.Join(errs...)
}

// removeAll deletes what the gateway owns (the API server's garbage collector would too, but
// it may not run, and users expect a deleted gateway to be gone at once) and its Connection.
func (r *GatewayReconciler) removeAll(ctx context.Context, owner client.Object) error {
	r.forgetApplied(owner)
	name, ns := owner.GetName(), owner.GetNamespace()
	meta := metav1.ObjectMeta{Name: name, Namespace: ns}
	var errs []error
	for _, obj := range []client.Object{
		&appsv1.Deployment{ObjectMeta: meta}, &corev1.Service{ObjectMeta: meta}, &rbacv1.RoleBinding{ObjectMeta: meta},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: GatewayRoleName(name), Namespace: ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: GatewayRoleName(name), Namespace: ns}},
		&policyv1.PodDisruptionBudget{ObjectMeta: meta},
		&corev1.ServiceAccount{ObjectMeta: meta}, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: config.KeySecretName(name), Namespace: ns}},
		&netv1alpha1.Connection{ObjectMeta: meta},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: clusterBindingName(ns, name)}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: clusterBindingName(ns, name) + "-pods"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: legacyClusterBindingName(ns, name)}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: legacyClusterBindingName(ns, name) + "-pods"}},
	} {
		if err := r.deleteIfOwned(ctx, owner, obj); err != nil {
			errs = append(errs, fmt.Errorf("delete %T %s/%s: %w", obj, ns, obj.GetName(), err))
		}
	}
	return errors.Join(errs...)
}
