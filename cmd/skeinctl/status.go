package main

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/buildinfo"
	"github.com/skein-net/skein/control/identity"
)

type clusterStatus struct {
	ClusterID    string   `json:"clusterID"`
	ClusterName  string   `json:"clusterName"`
	PodCIDRs     []string `json:"podCIDRs"`
	ServiceCIDRs []string `json:"serviceCIDRs"`
	ExternalCIDR string   `json:"externalCIDR"` // IPv4, or IPv6 in an IPv6-only cluster
	// ExternalCIDR6 is the IPv6 external CIDR of a dual-stack cluster.
	ExternalCIDR6 string            `json:"externalCIDR6,omitempty"`
	InternalCIDR  string            `json:"internalCIDR"`
	Version       string            `json:"skeinctlVersion"`
	Components    map[string]string `json:"components"`
}

func statusCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show this cluster's identity, network parameters and skein's components",
		Long: `Show what a peer needs to know about this cluster (its id and its pod, service, external and
internal CIDRs: what a Configuration written by hand holds) and whether skein's components run.`,
		Example: "  skeinctl status\n  skeinctl status -o json",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(c.Context(), g.timeout)
			defer cancel()
			cl, id, err := g.cluster(ctx, g.local())
			if err != nil {
				return err
			}
			n, err := identity.ReadNetwork(ctx, cl, g.liqoNamespace)
			if err != nil {
				return err
			}
			st := clusterStatus{ClusterID: id, ClusterName: identity.ClusterName(id), ExternalCIDR: n.ExternalCIDRs()[0].String(),
				InternalCIDR: n.InternalCIDR.String(), Version: buildinfo.Get().Version, Components: map[string]string{}}
			if ext := n.ExternalCIDRs(); len(ext) > 1 {
				st.ExternalCIDR6 = ext[1].String()
			}
			for _, p := range n.PodCIDRs {
				st.PodCIDRs = append(st.PodCIDRs, p.String())
			}
			for _, p := range n.ServiceCIDRs {
				st.ServiceCIDRs = append(st.ServiceCIDRs, p.String())
			}
			st.Components["skein-controller"] = deploymentHealth(ctx, cl, g.liqoNamespace)
			st.Components["skein-agent"] = daemonSetHealth(ctx, cl, g.liqoNamespace)
			if output != "" {
				return printObj(g.out, output, st)
			}
			w := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "Cluster ID\t%s\nCluster name\t%s\nPod CIDRs\t%s\nService CIDRs\t%s\nExternal CIDR\t%s\nInternal CIDR\t%s\nskeinctl\t%s\n",
				st.ClusterID, st.ClusterName, strings.Join(st.PodCIDRs, ", "), strings.Join(st.ServiceCIDRs, ", "), strings.Join(slices.DeleteFunc([]string{st.ExternalCIDR, st.ExternalCIDR6}, func(s string) bool { return s == "" }), ", "), st.InternalCIDR, st.Version)
			for _, k := range []string{"skein-controller", "skein-agent"} {
				fmt.Fprintf(w, "%s\t%s\n", k, st.Components[k])
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml instead of a table")
	return cmd
}

// componentLabels select a component of skein's chart, whatever the Helm release is called.
func componentLabels(component string) client.MatchingLabels {
	return client.MatchingLabels{"app.kubernetes.io/name": "skein", "app.kubernetes.io/component": component}
}

// deploymentHealth reports the controller's Deployment in ns, found by the chart's labels.
func deploymentHealth(ctx context.Context, c client.Client, ns string) string {
	var list appsv1.DeploymentList
	if err := c.List(ctx, &list, client.InNamespace(ns), componentLabels("controller")); err != nil {
		return "unknown: " + err.Error()
	}
	var states, names []string
	for _, d := range list.Items {
		want := desiredReplicas(d)
		state := fmt.Sprintf("%d/%d ready", d.Status.ReadyReplicas, want)
		if want == 0 {
			state = "scaled to 0 (not running)"
		}
		states, names = append(states, state), append(names, d.Name)
	}
	return health(states, names)
}

// desiredReplicas is a Deployment's spec.replicas, 1 when unset (the API's default).
func desiredReplicas(d appsv1.Deployment) int32 {
	if d.Spec.Replicas != nil {
		return *d.Spec.Replicas
	}
	return 1
}

// daemonSetHealth reports the agent's DaemonSet in ns, found by the chart's labels.
func daemonSetHealth(ctx context.Context, c client.Client, ns string) string {
	var list appsv1.DaemonSetList
	if err := c.List(ctx, &list, client.InNamespace(ns), componentLabels("agent")); err != nil {
		return "unknown: " + err.Error()
	}
	var states, names []string
	for _, d := range list.Items {
		states, names = append(states, fmt.Sprintf("%d/%d ready", d.Status.NumberReady, d.Status.DesiredNumberScheduled)), append(names, d.Name)
	}
	return health(states, names)
}

// health joins the states of the workloads found: "not installed" for none, the state for one,
// each named for several (two releases in one namespace).
func health(states, names []string) string {
	switch len(states) {
	case 0:
		return "not installed"
	case 1:
		return states[0]
	}
	for i := range states {
		states[i] = names[i] + ": " + states[i]
	}
	return strings.Join(states, ", ")
}

type peeringStatus struct {
	RemoteClusterID string `json:"remoteClusterID"`
	Namespace       string `json:"namespace"`
	RemotePodCIDR   string `json:"remotePodCIDR"`
	SeenPodCIDR     string `json:"remappedPodCIDR"`
	RemoteExtCIDR   string `json:"remoteExternalCIDR"`
	SeenExtCIDR     string `json:"remappedExternalCIDR"`
	Role            string `json:"gatewayRole"`
	Endpoint        string `json:"endpoint"`
	Connection      string `json:"connection"`
	Latency         string `json:"latency"`
	// ImportedServices are the ServiceImports (namespace/name) listing the peer.
	ImportedServices []string `json:"importedServices"`
	// ImportedNames are their names in the cluster set's DNS (NAME.NAMESPACE.svc.clusterset.local).
	ImportedNames []string `json:"importedNames"`
}

func networkStatusCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "List this cluster's peerings: CIDRs, gateway, endpoint, connection state, latency and the services imported from each",
		Example: "  skeinctl network status\n  skeinctl network status -o json",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(c.Context(), g.timeout)
			defer cancel()
			cl, err := g.client(ctx, g.local())
			if err != nil {
				return err
			}
			var confs netv1alpha1.ConfigurationList
			var servers netv1alpha1.GatewayServerList
			var clients netv1alpha1.GatewayClientList
			var conns netv1alpha1.ConnectionList
			for _, l := range []client.ObjectList{&confs, &servers, &clients, &conns} {
				if err := cl.List(ctx, l); err != nil {
					return err
				}
			}
			var imports mcsv1a1.ServiceImportList
			if err := cl.List(ctx, &imports); err != nil && !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err) {
				return err // the MCS API not installed: nothing imported
			}
			rows := []peeringStatus{} // "[]", not null, when there is no peering
			for _, cf := range confs.Items {
				id := cf.Labels[netv1alpha1.RemoteClusterIDLabel]
				spec := cf.Spec.Remote.CIDR
				row := peeringStatus{RemoteClusterID: id, Namespace: cf.Namespace, RemotePodCIDR: joinCIDRs(spec.Pods()),
					RemoteExtCIDR: joinCIDRs(append([]netv1alpha1.CIDR{spec.External}, spec.AdditionalExternals...)),
					Role:          "-", Endpoint: "-", Connection: "-", Latency: "-", ImportedServices: []string{}, ImportedNames: []string{}}
				for _, si := range imports.Items {
					if slices.ContainsFunc(si.Status.Clusters, func(c mcsv1a1.ClusterStatus) bool { return c.Cluster == id }) {
						row.ImportedServices = append(row.ImportedServices, si.Namespace+"/"+si.Name)
						row.ImportedNames = append(row.ImportedNames, clustersetName(si.Namespace, si.Name))
					}
				}
				if cf.Status.Remote != nil {
					seen := cf.Status.Remote.CIDR
					row.SeenPodCIDR = joinCIDRs(seen.Pods())
					row.SeenExtCIDR = joinCIDRs(append([]netv1alpha1.CIDR{seen.External}, seen.AdditionalExternals...))
				}
				gwName := ""
				for _, s := range servers.Items {
					if s.Labels[netv1alpha1.RemoteClusterIDLabel] == id {
						row.Role, gwName = "server", s.Name
						if s.Status.Endpoint != nil && len(s.Status.Endpoint.Addresses) > 0 {
							row.Endpoint = hostPort(string(s.Status.Endpoint.Addresses[0]), s.Status.Endpoint.Port)
						}
					}
				}
				for _, cl := range clients.Items {
					if cl.Labels[netv1alpha1.RemoteClusterIDLabel] == id {
						row.Role, gwName = "client", cl.Name
						if len(cl.Spec.Endpoint.Addresses) > 0 {
							row.Endpoint = hostPort(string(cl.Spec.Endpoint.Addresses[0]), cl.Spec.Endpoint.Port)
						}
					}
				}
				for _, cn := range conns.Items {
					if cn.Name == gwName && cn.Namespace == cf.Namespace {
						row.Connection = string(cn.Status.Value)
						if cn.Status.Latency != nil {
							row.Latency = cn.Status.Latency.Value.Duration.String()
						}
					}
				}
				rows = append(rows, row)
			}
			if output != "" {
				return printObj(g.out, output, rows)
			}
			w := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "REMOTE CLUSTER ID\tREMOTE POD CIDR\tSEEN AS\tREMOTE EXTERNAL CIDR\tSEEN AS\tROLE\tENDPOINT\tCONNECTION\tLATENCY\tIMPORTED SERVICES")
			for _, r := range rows {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.RemoteClusterID, r.RemotePodCIDR, dash(r.SeenPodCIDR), r.RemoteExtCIDR, dash(r.SeenExtCIDR), r.Role, r.Endpoint, r.Connection, r.Latency, importedCell(r.ImportedServices))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			// The names to call them by, once each (a service several peers export is one name).
			var names []string
			for _, r := range rows {
				names = append(names, r.ImportedNames...)
			}
			slices.Sort(names)
			if names = slices.Compact(names); len(names) > 0 {
				fmt.Fprintf(g.out, "\nImported services, by name (skein-controller answers them behind the cluster's DNS):\n")
				for _, n := range names {
					fmt.Fprintf(g.out, "  %s\n", n)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml instead of a table")
	return cmd
}

// importedCell lists up to three imported services and counts the rest.
func importedCell(names []string) string {
	switch {
	case len(names) == 0:
		return "-"
	case len(names) > 3:
		return fmt.Sprintf("%s (+%d)", strings.Join(names[:3], ","), len(names)-3)
	}
	return strings.Join(names, ",")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// joinCIDRs writes a list of CIDRs as "a,b".
func joinCIDRs(cs []netv1alpha1.CIDR) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = string(c)
	}
	return strings.Join(s, ",")
}

// hostPort is an endpoint as a dialer takes it: "[2001:db8::1]:51820" for an IPv6 address.
func hostPort[P ~int32 | ~uint16 | ~int](host string, port P) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}
