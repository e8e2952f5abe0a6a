// Package render renders gateway templates (WgGatewayServerTemplate,
// WgGatewayClientTemplate) for a GatewayServer or GatewayClient.
//
// A template's spec.template holds the gateway's resources before rendering:
//
//	metadata:   labels and annotations for everything rendered
//	spec:
//	  deployment: an apps/v1 DeploymentSpec
//	  service:    a core/v1 ServiceSpec (servers only)
//
// Every string of it that holds '{{ ... }}' is a Go template over the gateway: .Name,
// .Namespace, .ClusterID (the remote cluster id label), .SecretName (the key Secret),
// .GatewayUID, and .Spec with the gateway's spec, field names capitalised (.Spec.Mtu,
// .Spec.Endpoint.Port, .Spec.Endpoint.ServiceType). A string that is nothing but one such
// action whose value is a number or a boolean becomes that number or boolean, so ports and
// replica counts can be templated. There are no loops or named templates (range, template,
// define, block), printf's widths and precisions are at most 999, and a string renders to at
// most MaxOutput bytes: templates are user input the controller must render safely.
package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"text/template"
	"text/template/parse"
	"unicode"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Data is what a template sees.
type Data struct {
	Name, Namespace, ClusterID, SecretName, GatewayUID string
	// Spec is the gateway's spec as JSON decodes it, keys capitalised.
	Spec map[string]any
}

// NewData builds Data from a gateway's identity and its spec (any JSON-marshalable value).
func NewData(name, namespace, clusterID, secretName, uid string, spec any) (Data, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return Data{}, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return Data{}, err
	}
	return Data{Name: name, Namespace: namespace, ClusterID: clusterID, SecretName: secretName, GatewayUID: uid, Spec: capitalise(m).(map[string]any)}, nil
}

func capitalise(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			r := []rune(k)
			if len(r) > 0 {
				r[0] = unicode.ToUpper(r[0])
			}
			out[string(r)] = capitalise(e)
		}
		return out
	case []any:
		for i := range x {
			x[i] = capitalise(x[i])
		}
	}
	return v
}

// Rendered is a template rendered for one gateway.
type Rendered struct {
	Labels, Annotations map[string]string
	Deployment          *appsv1.DeploymentSpec
	Service             *corev1.ServiceSpec
}

// Render renders tmpl (a template's spec.template) with d. Errors name the path of the field
// that failed.
func Render(tmpl runtime.RawExtension, d Data) (*Rendered, error) {
	if len(tmpl.Raw) == 0 {
		return nil, fmt.Errorf("the template's spec.template is empty")
	}
	var tree any
	if err := json.Unmarshal(tmpl.Raw, &tree); err != nil {
		return nil, fmt.Errorf("spec.template is not valid JSON/YAML: %w", err)
	}
	out, err := walk(tree, "spec.template", d, &budget{left: MaxRendered})
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(out)
	var shaped struct {
		Metadata struct {
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			Deployment *appsv1.DeploymentSpec `json:"deployment"`
			Service    *corev1.ServiceSpec    `json:"service"`
		} `json:"spec"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&shaped); err != nil {
		return nil, fmt.Errorf("spec.template after rendering: %w", err)
	}
	if shaped.Spec.Deployment == nil {
		return nil, fmt.Errorf("spec.template.spec.deployment is missing")
	}
	return &Rendered{Labels: shaped.Metadata.Labels, Annotations: shaped.Metadata.Annotations,
		Deployment: shaped.Spec.Deployment, Service: shaped.Spec.Service}, nil
}

func walk(v any, path string, d Data, b *budget) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, err := walk(e, path+"."+k, d, b)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := walk(e, fmt.Sprintf("%s[%d]", path, i), d, b)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	case string:
		if !strings.Contains(x, "{{") {
			return x, nil
		}
		return renderString(x, path, d, b)
	}
	return v, nil
}

// MaxOutput bounds what one templated string renders to, and each value a template function
// makes (print, printf, println, html, js, urlquery).
const MaxOutput = 64 << 10

// MaxRendered bounds what one Render makes in all: every templated string's output and every
// value its functions make, kept or not (a variable doubled again and again,
// {{$a = print $a $a}}, is refused once it passes the bound, not when it is written).
const MaxRendered = 1 << 20

// budget is what is left of MaxRendered in one Render.
type budget struct{ left int }

// take charges n bytes, failing once the render as a whole would make more than MaxRendered,
// or one value more than MaxOutput.
func (b *budget) take(n int) error {
	if n > MaxOutput {
		return fmt.Errorf("a template function would make %d bytes, more than %d", n, MaxOutput)
	}
	if n > b.left {
		return fmt.Errorf("the template makes more than %d bytes in all (its functions' values and its output)", MaxRendered)
	}
	b.left -= n
	return nil
}

// sizeOf estimates what formatting args makes: strings as long as they are, anything else
// (numbers, booleans, the template's data) at most 64 bytes each, plus the format's own length
// and each of its verbs' widths.
func sizeOf(format string, args []any) int {
	n := len(format) + strings.Count(format, "%")*maxFormatNumber
	for _, a := range args {
		switch x := a.(type) {
		case string:
			n += len(x)
		case []byte:
			n += len(x)
		default:
			n += 64
		}
	}
	return n
}

// boundedFuncs are the template functions that make values, each charged to b: text/template's
// own print, println, html, js and urlquery, and printf with bounded widths.
func boundedFuncs(b *budget) template.FuncMap {
	made := func(estimate int, f func() string) (string, error) {
		if err := b.take(estimate); err != nil {
			return "", err
		}
		return f(), nil
	}
	return template.FuncMap{
		"printf": func(format string, args ...any) (string, error) {
			if err := checkFormat(format); err != nil {
				return "", err
			}
			return made(sizeOf(format, args), func() string { return fmt.Sprintf(format, args...) })
		},
		"print": func(args ...any) (string, error) {
			return made(sizeOf("", args), func() string { return fmt.Sprint(args...) })
		},
		"println": func(args ...any) (string, error) {
			return made(sizeOf("", args)+len(args), func() string { return fmt.Sprintln(args...) })
		},
		// Escaping makes a string at most six times longer (a character as \uXXXX).
		"html": func(args ...any) (string, error) {
			return made(6*sizeOf("", args), func() string { return template.HTMLEscapeString(fmt.Sprint(args...)) })
		},
		"js": func(args ...any) (string, error) {
			return made(6*sizeOf("", args), func() string { return template.JSEscapeString(fmt.Sprint(args...)) })
		},
		"urlquery": func(args ...any) (string, error) {
			return made(3*sizeOf("", args), func() string { return url.QueryEscape(fmt.Sprint(args...)) })
		},
	}
}

// maxFormatNumber bounds a width or precision in printf's format (the rest of a pod spec has
// no use for wider fields; fmt itself allows a million).
const maxFormatNumber = 999

// Templates are written by users, and a controller that renders them must not be made to loop
// or to fill its memory: a template has no loops or named templates (range, template, define,
// block are refused: execution is then linear in the template's length), printf's widths and
// precisions are bounded, each string renders to at most MaxOutput bytes, and everything a
// Render makes (boundedFuncs' values and the output) to at most MaxRendered.

// checkFormat refuses a printf format with a width or precision above maxFormatNumber
// (including one taken from the arguments, '*').
func checkFormat(format string) error {
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		for i++; i < len(format); i++ {
			c := format[i]
			if c == '*' {
				return fmt.Errorf("printf: widths from arguments ('*') are not allowed in templates")
			}
			if c >= '0' && c <= '9' {
				n := 0
				for ; i < len(format) && format[i] >= '0' && format[i] <= '9'; i++ {
					if n = n*10 + int(format[i]-'0'); n > maxFormatNumber {
						return fmt.Errorf("printf: a width or precision above %d in %q", maxFormatNumber, format)
					}
				}
				i--
				continue
			}
			if strings.IndexByte("+-# .[]", c) >= 0 {
				continue
			}
			break // the verb
		}
	}
	return nil
}

// checkTree refuses the actions that loop or recurse.
func checkTree(n parse.Node) error {
	switch x := n.(type) {
	case *parse.ListNode:
		if x == nil {
			return nil
		}
		for _, c := range x.Nodes {
			if err := checkTree(c); err != nil {
				return err
			}
		}
	case *parse.RangeNode:
		return fmt.Errorf("range is not allowed in gateway templates (at %d)", x.Position())
	case *parse.TemplateNode:
		return fmt.Errorf("template is not allowed in gateway templates (at %d)", x.Position())
	case *parse.IfNode:
		return errors.Join(checkTree(x.List), checkTree(x.ElseList))
	case *parse.WithNode:
		return errors.Join(checkTree(x.List), checkTree(x.ElseList))
	}
	return nil
}

// limitedWriter fails once more than n bytes were written, or the render's budget is spent.
type limitedWriter struct {
	b      bytes.Buffer
	n      int
	budget *budget
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	if w.b.Len()+len(p) > w.n {
		return 0, fmt.Errorf("renders to more than %d bytes", w.n)
	}
	if err := w.budget.take(len(p)); err != nil {
		return 0, err
	}
	return w.b.Write(p)
}

// renderString renders one string; a lone action with a typed value keeps its type.
func renderString(s, path string, d Data, bud *budget) (any, error) {
	t, err := template.New(path).Option("missingkey=error").Funcs(boundedFuncs(bud)).Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(t.Templates()) > 1 {
		return nil, fmt.Errorf("%s: define and block are not allowed in gateway templates", path)
	}
	if err := checkTree(t.Tree.Root); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	b := &limitedWriter{n: MaxOutput, budget: bud}
	if err := t.Execute(b, d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := b.b.String()
	trimmed := strings.TrimSpace(s)
	if strings.HasPrefix(trimmed, "{{") && strings.HasSuffix(trimmed, "}}") && strings.Count(trimmed, "{{") == 1 {
		var typed any
		if err := json.Unmarshal([]byte(out), &typed); err == nil {
			switch typed.(type) {
			case float64, bool:
				return typed, nil
			}
		}
	}
	return out, nil
}
