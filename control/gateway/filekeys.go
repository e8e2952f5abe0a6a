package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"

	goyaml "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// The config file's keys, walked from the File type: unknown keys are named with the path
// they are at and the known key they most likely meant, instead of the JSON decoder's
// "unknown field" alone.

// fileKey is one key of a YAML object of the file: its name and the Go type under it.
type fileKey struct {
	name string
	typ  reflect.Type
}

// keysOf lists the keys an object of struct type t takes (its fields' json names).
func keysOf(t reflect.Type) []fileKey {
	var keys []fileKey
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		keys = append(keys, fileKey{name, f.Type})
	}
	return keys
}

// unknownKeys walks the decoded document v against type t and describes every key t does not
// take, at its path (such as "remote.podCidr"), with the closest known key, and every value of
// the wrong type (such as "nodes[0].podCIDRs: want a list, not a string").
func unknownKeys(v any, t reflect.Type, path string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return nil // null: the zero value
	}
	wrong := func() []string {
		return []string{fmt.Sprintf("%s: want %s, not %s", path, typeWanted(t), jsonKind(v))}
	}
	var problems []string
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return wrong()
		}
		keys := keysOf(t)
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = k.name
		}
		given := make([]string, 0, len(obj))
		for k := range obj {
			given = append(given, k)
		}
		sort.Strings(given)
		for _, k := range given {
			field := joinPath(path, k)
			i := indexOf(names, k)
			if i < 0 {
				problems = append(problems, field+": "+unknownKeyMessage(k, names))
				continue
			}
			problems = append(problems, unknownKeys(obj[k], keys[i].typ, field)...)
		}
	case reflect.Slice:
		list, ok := v.([]any)
		if !ok {
			return wrong()
		}
		for i, e := range list {
			problems = append(problems, unknownKeys(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return wrong()
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return wrong()
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		f, ok := v.(float64)
		if !ok {
			return wrong()
		}
		if f != float64(int64(f)) || overflows(t, f) {
			return []string{fmt.Sprintf("%s: want %s, not %v", path, typeWanted(t), f)}
		}
	}
	return problems
}

// overflows reports whether the whole number f does not fit integer type t.
func overflows(t reflect.Type, f float64) bool {
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return f < 0 || reflect.New(t).Elem().OverflowUint(uint64(f))
	}
	return reflect.New(t).Elem().OverflowInt(int64(f))
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func indexOf(names []string, k string) int {
	for i, n := range names {
		if n == k {
			return i
		}
	}
	return -1
}

// unknownKeyMessage says that key is not one of known, and which it most likely meant.
func unknownKeyMessage(key string, known []string) string {
	if s := closestKey(key, known); s != "" {
		return fmt.Sprintf("unknown field; did you mean %s?", s)
	}
	return fmt.Sprintf("unknown field (known here: %s)", strings.Join(known, ", "))
}

// closestKey returns the known key key most likely misspells: the same letters in other case
// first, then the nearest by edit distance when the distance is small for the key's length
// ("" when none is close).
func closestKey(key string, known []string) string {
	for _, k := range known {
		if strings.EqualFold(k, key) {
			return k
		}
	}
	best, bestD := "", 0
	lk := strings.ToLower(key)
	for _, k := range known {
		d := editDistance(lk, strings.ToLower(k))
		if best == "" || d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" || bestD > max(2, len(best)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes; the keys are ASCII).
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b)) // no key is that long: not close to anything
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// decodeFile decodes a config file: YAML as JSON, strictly. Its errors name the field at
// fault by its path in the file: an unknown key with the key it most likely meant, a value of
// the wrong type with the type wanted.
func decodeFile(b []byte) (*File, error) {
	if err := oneDocument(b); err != nil {
		return nil, err
	}
	j, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "error converting YAML to JSON: "))
	}
	var doc any
	if err := json.Unmarshal(j, &doc); err != nil {
		return nil, err
	}
	if problems := unknownKeys(doc, reflect.TypeOf(File{}), ""); len(problems) > 0 {
		if len(problems) > maxProblems {
			problems = append(problems[:maxProblems], fmt.Sprintf("... and %d more", len(problems)-maxProblems))
		}
		return nil, errors.New(strings.Join(problems, "\n  "))
	}
	if _, ok := doc.(map[string]any); !ok && doc != nil {
		return nil, fmt.Errorf("want an object of keys (role, privateKeyFile, ...), not %s", jsonKind(doc))
	}
	var c File
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, fmt.Errorf("%s: want %s, not %s", te.Field, typeWanted(te.Type), article(te.Value))
		}
		return nil, err
	}
	return &c, nil
}

// maxProblems bounds how many unknown keys and wrong types one error names (a file of a
// million unknown keys is not worth a million lines).
const maxProblems = 20

// oneDocument refuses a file of several YAML documents: the decoder reads the first alone,
// and a second one (role: client after ---) would be ignored without a word.
func oneDocument(b []byte) error {
	dec := goyaml.NewDecoder(bytes.NewReader(b))
	for n := 0; ; n++ {
		var node goyaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return nil // a syntax error: the strict decoder reports it with its line
		}
		if n == 1 {
			return fmt.Errorf("the file has more than one YAML document (a line \"---\" after the first): a gateway reads one; keep one")
		}
	}
}

// typeWanted says what a value of Go type t looks like in YAML.
func typeWanted(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("a whole number from 0 to %d", uint64(1)<<(t.Bits())-1)
	case reflect.Slice:
		return "a list"
	case reflect.Struct:
		return "an object of keys"
	}
	return t.String()
}

// article puts "a" or "an" before the JSON decoder's name of a value's kind ("number -1").
func article(v string) string {
	v = strings.Replace(v, "array", "list", 1)
	if v != "" && strings.ContainsRune("aeiou", rune(v[0])) {
		return "an " + v
	}
	return "a " + v
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}
