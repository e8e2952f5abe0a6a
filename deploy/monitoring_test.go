package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/skein-net/skein/internal/metricsdoc"
)

// readRules loads files/alerts.yaml as Prometheus loads a rule file (strict fields, durations,
// expressions and annotation templates checked).
func readRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	b, err := os.ReadFile("chart/files/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rgs, errs := rulefmt.Parse(b, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("chart/files/alerts.yaml: %v", errs)
	}
	return rgs
}

// targetLabels are the labels Prometheus and the PodMonitor give every series of a target.
var targetLabels = map[string]bool{"instance": true, "job": true, "namespace": true, "pod": true, "container": true, "endpoint": true, "node": true}

// queryable maps the series names a query may use to their labels: docs/metrics.md's metrics
// (not deprecated; a histogram as its _bucket, _sum and _count series), the process
// collector's, which every daemon registers, and Prometheus's own up.
func queryable(t *testing.T) map[string]map[string]bool {
	t.Helper()
	ref, err := metricsdoc.Load()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{"up": {}}
	for _, m := range ref {
		if m.Deprecated {
			continue
		}
		labels := map[string]bool{}
		for _, l := range m.Labels {
			labels[l] = true
		}
		if m.Type != "histogram" {
			out[m.Name] = labels
			continue
		}
		out[m.Name+"_sum"], out[m.Name+"_count"] = labels, labels
		bucket := maps.Clone(labels)
		bucket["le"] = true
		out[m.Name+"_bucket"] = bucket
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		out[mf.GetName()] = map[string]bool{}
	}
	return out
}

// checkQuery parses a query as a stock Prometheus would and returns the problems: a syntax
// error, a metric the daemons do not expose, or a label its series do not have (in a selector,
// by/without, on/ignoring or group_left/right).
func checkQuery(q string, metrics map[string]map[string]bool) []string {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(q)
	if err != nil {
		return []string{fmt.Sprintf("%q: %v", q, err)}
	}
	var bad []string
	known := maps.Clone(targetLabels)
	var grouping []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			labels, ok := metrics[n.Name]
			switch {
			case n.Name == "":
				bad = append(bad, fmt.Sprintf("%q: a selector without a metric name", q))
			case !ok:
				bad = append(bad, fmt.Sprintf("%q: %s is not a metric of docs/metrics.md", q, n.Name))
			}
			for l := range labels {
				known[l] = true
			}
			for _, m := range n.LabelMatchers {
				if m.Name != "__name__" && !labels[m.Name] && !targetLabels[m.Name] {
					bad = append(bad, fmt.Sprintf("%q: %s has no label %s", q, n.Name, m.Name))
				}
			}
		case *parser.AggregateExpr:
			grouping = append(grouping, n.Grouping...)
		case *parser.BinaryExpr:
			if vm := n.VectorMatching; vm != nil {
				grouping = append(grouping, vm.MatchingLabels...)
				grouping = append(grouping, vm.Include...)
			}
		}
		return nil
	})
	for _, l := range grouping {
		if !known[l] {
			bad = append(bad, fmt.Sprintf("%q: no series of the query has the label %s", q, l))
		}
	}
	return bad
}

func TestAlertRules(t *testing.T) {
	names := queryable(t)
	rf := readRules(t)
	doc, err := os.ReadFile(metricsdoc.Path())
	if err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if r.Alert == "" {
				t.Errorf("a recording rule in the alerts file: %+v", r)
			}
			for _, p := range checkQuery(r.Expr, names) {
				t.Errorf("%s: %s", r.Alert, p)
			}
			if !strings.HasPrefix(r.Alert, "Skein") || (r.Labels["severity"] != "critical" && r.Labels["severity"] != "warning") ||
				r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: want a Skein name, severity critical or warning, a summary and a description: %+v", r.Alert, r)
			}
			if !strings.Contains(string(doc), "| `"+r.Alert+"` |") {
				t.Errorf("%s is not in docs/metrics.md's table of alerts", r.Alert)
			}
		}
	}
	var documented []string
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(l, "| `Skein") {
			documented = append(documented, strings.Trim(strings.Fields(l)[1], "`"))
		}
	}
	slices.Sort(alerts)
	slices.Sort(documented)
	if !slices.Equal(alerts, documented) {
		t.Errorf("alerts %v, docs/metrics.md documents %v", alerts, documented)
	}
}

// TestAlertRulesFire evaluates each alert's expression with Prometheus's engine over sample
// series: it must fire in the situation it names and stay quiet in the one next to it.
func TestAlertRulesFire(t *testing.T) {
	exprs := map[string]string{}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] = r.Expr
		}
	}
	// Series at 1 minute steps from t=0, evaluated at 15m (time() = 900).
	cases := []struct {
		alert, name, series string
		fires               bool
	}{
		{"SkeinConnectionNotConnected", "active and not Connected", `
			skein_gateway_connection_state{instance="a",state="Connected"} 0x20
			skein_gateway_active{instance="a"} 1x20`, true},
		{"SkeinConnectionNotConnected", "another cluster's active gateway at the same address", `
			skein_gateway_connection_state{cluster="one",instance="a",state="Connected"} 0x20
			skein_gateway_active{cluster="two",instance="a"} 1x20`, false},
		{"SkeinConnectionNotConnected", "a standby, never Connected", `
			skein_gateway_connection_state{instance="a",state="Connected"} 0x20
			skein_gateway_active{instance="a"} 0x20`, false},
		{"SkeinConnectionNotConnected", "active and Connected", `
			skein_gateway_connection_state{instance="a",state="Connected"} 1x20
			skein_gateway_active{instance="a"} 1x20`, false},
		{"SkeinGatewayNotConfigured", "waiting", `
			skein_gateway_configured{instance="a"} 0x20`, true},
		{"SkeinGatewayNotConfigured", "running", `
			skein_gateway_configured{instance="a"} 1x20`, false},
		{"SkeinHandshakeStale", "active, never a handshake (a rejected key)", `
			skein_gateway_active{instance="a"} 1x20`, true},
		{"SkeinHandshakeStale", "a standby, never a handshake", `
			skein_gateway_active{instance="a"} 0x20`, false},
		{"SkeinHandshakeStale", "last handshake 10 minutes ago", `
			skein_gateway_last_handshake_timestamp_seconds{instance="a"} 300x20
			skein_gateway_active{instance="a"} 1x20`, true},
		{"SkeinHandshakeStale", "last handshake 100 s ago", `
			skein_gateway_last_handshake_timestamp_seconds{instance="a"} 800x20
			skein_gateway_active{instance="a"} 1x20`, false},
		{"SkeinDropsRising", "5 of 15 packets a second dropped", `
			skein_gateway_packets_handled_total{instance="a",direction="to-tunnel",outcome="forwarded"} 0+600x20
			skein_gateway_packets_handled_total{instance="a",direction="to-tunnel",outcome="dropped"} 0+300x20`, true},
		{"SkeinDropsRising", "a drop every 10 s", `
			skein_gateway_packets_handled_total{instance="a",direction="to-tunnel",outcome="forwarded"} 0+600x20
			skein_gateway_packets_handled_total{instance="a",direction="to-tunnel",outcome="dropped"} 0+6x20`, false},
		{"SkeinProbeLoss", "one probe in five lost", `
			skein_gateway_probes_lost_total{instance="a"} 0+6x20
			skein_gateway_probe_round_trip_seconds_count{instance="a"} 0+24x20
			skein_gateway_active{instance="a"} 1x20`, true},
		{"SkeinProbeLoss", "no probe lost", `
			skein_gateway_probes_lost_total{instance="a"} 0x20
			skein_gateway_probe_round_trip_seconds_count{instance="a"} 0+30x20
			skein_gateway_active{instance="a"} 1x20`, false},
		{"SkeinWireGuardSendErrors", "a refused batch every 10 s", `
			skein_gateway_wireguard_send_errors_total{instance="a",kind="message_too_long"} 0+6x20
			skein_gateway_wireguard_send_errors_total{instance="a",kind="other"} 0x20`, true},
		{"SkeinWireGuardSendErrors", "one error in 20 minutes", `
			skein_gateway_wireguard_send_errors_total{instance="a",kind="message_too_long"} 0x10 1x10`, false},
		{"SkeinAgentNotReconciling", "last success (or start) 15 minutes ago", `
			skein_agent_last_success_timestamp_seconds{instance="n"} 0x20`, true},
		{"SkeinAgentNotReconciling", "last success 1 minute ago", `
			skein_agent_last_success_timestamp_seconds{instance="n"} 0+60x20`, false},
		{"SkeinAgentNotReconciling", "started 1 minute ago, no success yet", `
			skein_agent_last_success_timestamp_seconds{instance="n"} _x13 840 840 840 840 840 840 840 840`, false},
		{"SkeinTargetDown", "a pod not answering", `
			up{job="skein",instance="a"} 0x20`, true},
		{"SkeinTargetDown", "answering", `
			up{job="skein",instance="a"} 1x20`, false},
		{"SkeinTargetDown", "another job's target down", `
			up{job="other",instance="a"} 0x20`, false},
		{"SkeinAgentRefusesCIDR", "one CIDR refused", `
			skein_agent_refused_cidrs{instance="n"} 1x20`, true},
		{"SkeinAgentRefusesCIDR", "none refused", `
			skein_agent_refused_cidrs{instance="n"} 0x20`, false},
		{"SkeinIPAMPoolNearlyFull", "240 of 256 used", `
			skein_controller_ipam_pool_size_addresses{pool="p"} 256x20
			skein_controller_ipam_pool_reserved_addresses{pool="p"} 100x20
			skein_controller_ipam_pool_assigned_addresses{pool="p"} 140x20`, true},
		{"SkeinIPAMPoolNearlyFull", "110 of 256 used", `
			skein_controller_ipam_pool_size_addresses{pool="p"} 256x20
			skein_controller_ipam_pool_reserved_addresses{pool="p"} 100x20
			skein_controller_ipam_pool_assigned_addresses{pool="p"} 10x20`, false},
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 100000, Timeout: time.Minute})
	defer engine.Close()
	covered := map[string][2]bool{}
	for _, tc := range cases {
		expr, ok := exprs[tc.alert]
		if !ok {
			t.Errorf("no alert %s in chart/files/alerts.yaml", tc.alert)
			continue
		}
		st, err := loadSeries(tc.series)
		if err != nil {
			t.Fatalf("%s, %s: %v", tc.alert, tc.name, err)
		}
		q, err := engine.NewInstantQuery(context.Background(), st, nil, expr, time.Unix(900, 0))
		if err != nil {
			t.Fatalf("%s: %v", tc.alert, err)
		}
		res := q.Exec(context.Background())
		if res.Err != nil {
			t.Fatalf("%s: %v", tc.alert, res.Err)
		}
		vec, _ := res.Value.(promql.Vector)
		if fired := len(vec) > 0; fired != tc.fires {
			t.Errorf("%s, %s: fired %v (%v), want %v", tc.alert, tc.name, fired, res.Value, tc.fires)
		}
		q.Close()
		c := covered[tc.alert]
		c[map[bool]int{true: 0, false: 1}[tc.fires]] = true
		covered[tc.alert] = c
	}
	for alert := range exprs {
		if c := covered[alert]; !c[0] || !c[1] {
			t.Errorf("%s: want a case where it fires and one where it does not", alert)
		}
	}
}

// memStore is an in-memory storage.Queryable of float series, enough for the engine to
// evaluate rules over (Prometheus's own test storage pulls in its service discovery, whose
// dependencies the module proxy does not all serve).
type memStore []storage.Series

// loadSeries reads lines of "name{labels} values" in the notation of Prometheus's rule tests
// ("0+60x20": 0, 60, 120, ... 21 samples), one sample a minute from t=0.
func loadSeries(text string) (memStore, error) {
	var st memStore
	p := parser.NewParser(parser.Options{})
	for l := range strings.Lines(text) {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		lset, values, err := p.ParseSeriesDesc(l)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", l, err)
		}
		var samples []chunks.Sample
		for i, v := range values {
			if !v.Omitted {
				samples = append(samples, floatSample{t: int64(i) * time.Minute.Milliseconds(), f: v.Value})
			}
		}
		st = append(st, storage.NewListSeries(lset, samples))
	}
	return st, nil
}

func (m memStore) Querier(int64, int64) (storage.Querier, error) {
	return &storage.MockQuerier{SelectMockFunction: func(sortSeries bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
		var out []storage.Series
		for _, s := range m {
			if matchAll(s.Labels(), ms) {
				out = append(out, s)
			}
		}
		if sortSeries {
			slices.SortFunc(out, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
		}
		return &seriesList{list: out, i: -1}
	}}, nil
}

func matchAll(l labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(l.Get(m.Name)) {
			return false
		}
	}
	return true
}

type seriesList struct {
	list []storage.Series
	i    int
}

func (s *seriesList) Next() bool                        { s.i++; return s.i < len(s.list) }
func (s *seriesList) At() storage.Series                { return s.list[s.i] }
func (s *seriesList) Err() error                        { return nil }
func (s *seriesList) Warnings() annotations.Annotations { return nil }

type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                      { return s.t }
func (s floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                    { return s.f }
func (s floatSample) H() *histogram.Histogram       { return nil }
func (s floatSample) FH() *histogram.FloatHistogram { return nil }
func (s floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample           { return s }

// grafanaVariables are Grafana's own variables, given a value a stock Prometheus accepts.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// dashPanel is a panel of the dashboard; a row holds its panels when collapsed.
type dashPanel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("chart/files/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []dashPanel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("chart/files/dashboard.json: %v", err)
	}
	metrics := queryable(t)
	ids := map[int]bool{}
	queries := 0
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if ids[p.ID] || p.GridPos == nil || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: id %d repeated, or no place on the 24-column grid", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				queries++
				for _, problem := range checkQuery(grafanaVariables.Replace(tg.Expr), metrics) {
					t.Errorf("panel %q: %s", p.Title, problem)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((\w+),\s*(\w+)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := fmt.Sprint(v.Query)
		if m, ok := v.Query.(map[string]any); ok {
			q = fmt.Sprint(m["query"])
		}
		m := labelValues.FindStringSubmatch(q)
		if m == nil || metrics[m[1]] == nil || (!metrics[m[1]][m[2]] && !targetLabels[m[2]]) {
			t.Errorf("variable %s: query %q: want label_values of a metric of docs/metrics.md and one of its labels", v.Name, q)
		}
	}
	if d.UID == "" || queries < 10 {
		t.Errorf("dashboard uid %q, %d queries", d.UID, queries)
	}
}

// TestCheckQueryCatches: the query check rejects what it is for.
func TestCheckQueryCatches(t *testing.T) {
	metrics := map[string]map[string]bool{
		"skein_agent_reconciles_total":        {},
		"skein_gateway_packets_dropped_total": {"direction": true, "reason": true},
		"skein_gateway_packets_handled_total": {"direction": true, "outcome": true},
	}
	for _, q := range []string{
		`rate(skein_agent_reconciles_total[5m]`,                                      // syntax
		`rate(skein_agent_reconcile_total[5m])`,                                      // no such metric
		`{__name__=~"skein_.*"}`,                                                     // no name to check
		`skein_agent_reconciles_total + skein_gone`,                                  // one of two unknown
		`skein_gateway_packets_dropped_total{outcome="dropped"}`,                     // a label of another metric
		`sum by (reason) (rate(skein_gateway_packets_handled_total[5m]))`,            // grouping by a label it lacks
		`skein_agent_reconciles_total and on (cluster) skein_agent_reconciles_total`, // matching on a label none has
	} {
		if len(checkQuery(q, metrics)) == 0 {
			t.Errorf("%s: accepted", q)
		}
	}
	for _, q := range []string{
		`sum by (reason, namespace) (rate(skein_gateway_packets_dropped_total{direction="to-tunnel",pod=~"gw.*"}[5m]))`,
		`skein_gateway_packets_handled_total{outcome="dropped"} / ignoring (outcome) group_left sum without (outcome) (skein_gateway_packets_handled_total)`,
	} {
		if p := checkQuery(q, metrics); len(p) != 0 {
			t.Errorf("a good query rejected: %v", p)
		}
	}
}

// TestChartMonitoring renders the chart with monitoring on and off: the PodMonitor selects
// every skein pod by the label all of them carry and scrapes the port all of them name
// metrics; the PrometheusRule and the dashboard ConfigMap carry the files unchanged.
func TestChartMonitoring(t *testing.T) {
	helmBinary(t)
	for _, o := range renderChart(t, "liqo", map[string]any{}) {
		if k := o.GetKind(); k == "PodMonitor" || k == "PrometheusRule" || strings.HasSuffix(o.GetName(), "-dashboard") {
			t.Errorf("%s %s rendered with monitoring off", k, o.GetName())
		}
	}
	on := map[string]any{"monitoring": map[string]any{
		"podMonitor":     map[string]any{"enabled": true, "interval": "15s", "labels": map[string]any{"release": "prom"}},
		"prometheusRule": map[string]any{"enabled": true},
		"dashboard":      map[string]any{"enabled": true},
	}}
	objs := renderChart(t, "liqo", on)
	pm := find(objs, "PodMonitor", releaseName)
	if pm == nil {
		t.Fatal("no PodMonitor")
	}
	sel, _, _ := unstructured.NestedString(pm.Object, "spec", "selector", "matchLabels", "app.kubernetes.io/part-of")
	anyNS, _, _ := unstructured.NestedBool(pm.Object, "spec", "namespaceSelector", "any")
	eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if sel != "skein" || !anyNS || len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" || eps[0].(map[string]any)["interval"] != "15s" ||
		pm.GetLabels()["release"] != "prom" {
		t.Errorf("PodMonitor: %v", pm.Object)
	}

	// Every pod the chart and the default gateway templates run carries the label and the port.
	pods := 0
	for _, o := range objs {
		var tmpl map[string]any
		switch o.GetKind() {
		case "Deployment", "DaemonSet":
			tmpl, _, _ = unstructured.NestedMap(o.Object, "spec", "template")
		case "WgGatewayServerTemplate", "WgGatewayClientTemplate":
			tmpl, _, _ = unstructured.NestedMap(o.Object, "spec", "template", "spec", "deployment", "template")
		default:
			continue
		}
		pods++
		labels, _, _ := unstructured.NestedMap(tmpl, "metadata", "labels")
		containers, _, _ := unstructured.NestedSlice(tmpl, "spec", "containers")
		named := false
		for _, c := range containers {
			ports, _ := c.(map[string]any)["ports"].([]any)
			for _, p := range ports {
				named = named || p.(map[string]any)["name"] == "metrics"
			}
		}
		if labels["app.kubernetes.io/part-of"] != "skein" || !named {
			t.Errorf("%s %s: pods labelled %v, a port named metrics: %v", o.GetKind(), o.GetName(), labels, named)
		}
	}
	if pods != 4 {
		t.Errorf("%d pod templates checked, want the controller, the agent and two gateway templates", pods)
	}

	rule := find(objs, "PrometheusRule", releaseName)
	want := map[string]any{}
	b, _ := os.ReadFile("chart/files/alerts.yaml")
	if err := yaml.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if rule == nil || fmt.Sprint(rule.Object["spec"]) != fmt.Sprint(want) {
		t.Errorf("PrometheusRule spec is not files/alerts.yaml: %v", rule)
	}
	cm := find(objs, "ConfigMap", releaseName+"-dashboard")
	dash, _ := os.ReadFile("chart/files/dashboard.json")
	if cm == nil || cm.GetLabels()["grafana_dashboard"] != "1" || strings.TrimSpace(fmt.Sprint(cm.Object["data"].(map[string]any)["skein.json"])) != strings.TrimSpace(string(dash)) {
		t.Errorf("dashboard ConfigMap: %v", cm)
	}
}
