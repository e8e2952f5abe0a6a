package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// export and unexport: a ServiceExport (Multi-Cluster Services API) made or removed, as
// `kubectl apply` of one would; with --wait, what skein-controller concluded about it.

func exportCmd(g *globals) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "export SERVICE",
		Short: "Export a Service to every peered cluster (creates its ServiceExport)",
		Long: `Create the ServiceExport of SERVICE in its namespace (-n, default "default"). Every peered
cluster that has the namespace then imports it: a ServiceImport of the same name and a
ClusterIP Service (derived-<hash>) whose endpoints are this Service's ready pods as that cluster
reaches them. The same as kubectl apply of:

  apiVersion: multicluster.x-k8s.io/v1alpha1
  kind: ServiceExport
  metadata: {name: SERVICE, namespace: NAMESPACE}

With --wait, wait until this cluster's skein-controller has judged the export and print its
Valid and Conflict conditions (docs/services.md explains them).`,
		Example: "  skeinctl export orders -n shop --wait\n  skeinctl unexport orders -n shop",
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			name, ns := args[0], g.requestNamespace("")
			if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
				return fmt.Errorf("%q is not a Service name: %s", name, strings.Join(errs, "; "))
			}
			ctx, cancel := context.WithTimeout(c.Context(), g.timeout)
			defer cancel()
			cl, err := g.client(ctx, g.local())
			if err != nil {
				return err
			}
			if ok, err := mcsInstalled(ctx, cl); err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("the Multi-Cluster Services API (ServiceExport, multicluster.x-k8s.io) is not installed in this cluster: install or upgrade skein's chart")
			}
			if err := cl.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); apierrors.IsNotFound(err) {
				return fmt.Errorf("there is no namespace %s in this cluster", ns)
			} else if err != nil {
				return err
			}
			hasService := true
			if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Service{}); apierrors.IsNotFound(err) {
				hasService = false
				fmt.Fprintf(g.out, "WARN   There is no Service %s/%s yet: the export stays invalid (NoService) until there is\n", ns, name)
			} else if err != nil {
				return err
			}
			exp := &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			switch err := cl.Create(ctx, exp); {
			case apierrors.IsAlreadyExists(err):
				fmt.Fprintf(g.out, "INFO   ServiceExport %s/%s already exists\n", ns, name)
			case err != nil:
				return fmt.Errorf("create ServiceExport %s/%s: %w", ns, name, err)
			default:
				fmt.Fprintf(g.out, "INFO   ServiceExport %s/%s created\n", ns, name)
			}
			if !wait {
				return nil
			}
			if err := waitFor(ctx, func() (bool, error) {
				err := cl.Get(ctx, client.ObjectKeyFromObject(exp), exp)
				c := meta.FindStatusCondition(exp.Status.Conditions, string(mcsv1a1.ServiceExportConditionValid))
				// An export that existed before its Service may still carry the verdict of then
				// (NoService) until the controller has seen the Service: that one is waited out.
				stale := c != nil && hasService && c.Reason == string(mcsv1a1.ServiceExportReasonNoService)
				return err == nil && c != nil && !stale, err
			}); err != nil {
				return fmt.Errorf("waiting for skein-controller to judge ServiceExport %s/%s (is it running, with --multicluster-services?): %w", ns, name, err)
			}
			for _, t := range []mcsv1a1.ServiceExportConditionType{mcsv1a1.ServiceExportConditionValid, mcsv1a1.ServiceExportConditionConflict} {
				if c := meta.FindStatusCondition(exp.Status.Conditions, string(t)); c != nil {
					level := "INFO"
					if (t == mcsv1a1.ServiceExportConditionValid) != (c.Status == metav1.ConditionTrue) {
						level = "WARN"
					}
					fmt.Fprintf(g.out, "%-6s %s=%s (%s): %s\n", level, c.Type, c.Status, c.Reason, printable(c.Message))
				}
			}
			if meta.IsStatusConditionFalse(exp.Status.Conditions, string(mcsv1a1.ServiceExportConditionValid)) {
				return fmt.Errorf("ServiceExport %s/%s is not valid", ns, name)
			}
			if c := meta.FindStatusCondition(exp.Status.Conditions, string(mcsv1a1.ServiceExportConditionConflict)); c != nil && c.Reason == string(mcsv1a1.ServiceExportReasonTypeConflict) &&
				!strings.Contains(c.Message, "this export's is used") {
				return fmt.Errorf("ServiceExport %s/%s conflicts in type with an older export: none of this cluster's endpoints is imported anywhere", ns, name)
			}
			fmt.Fprintf(g.out, "INFO   Reachable in every peered cluster (and here) as %s\n", clustersetName(ns, name))
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for skein-controller's Valid and Conflict conditions and print them")
	return cmd
}

func unexportCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "unexport SERVICE",
		Short: "Stop exporting a Service (deletes its ServiceExport)",
		Long: `Delete the ServiceExport of SERVICE in its namespace (-n, default "default"). The peered
clusters remove this cluster's endpoints from their import of it at once, and the import itself
when no cluster exports it any more. The Service is left as it is.`,
		Example: "  skeinctl unexport orders -n shop",
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			name, ns := args[0], g.requestNamespace("")
			ctx, cancel := context.WithTimeout(c.Context(), g.timeout)
			defer cancel()
			cl, err := g.client(ctx, g.local())
			if err != nil {
				return err
			}
			err = cl.Delete(ctx, &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
			switch {
			case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
				return fmt.Errorf("there is no ServiceExport %s/%s", ns, name)
			case err != nil:
				return err
			}
			fmt.Fprintf(g.out, "INFO   ServiceExport %s/%s deleted\n", ns, name)
			return nil
		},
	}
}

// clustersetName is the name an exported service is found by in every cluster of the set
// (KEP-1645's DNS: skein-controller answers it behind the cluster's DNS).
func clustersetName(ns, name string) string { return name + "." + ns + ".svc.clusterset.local" }
