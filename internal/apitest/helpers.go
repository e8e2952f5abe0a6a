package apitest

import (
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// Eventually polls ok every 50 ms until it holds; after within it fails tb, saying what was
// awaited and, when given, the state last observed (state is called once, at the failure).
// Controllers converge at their own pace: a test waits for the state, never for a time.
func Eventually(tb testing.TB, what string, within time.Duration, ok func() bool, state ...func() string) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			msg := what + ": not within " + within.String()
			for _, s := range state {
				msg += "\n" + s()
			}
			tb.Fatal(msg)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CreateFromFile creates the object of the one-document YAML manifest at path with c, in ns
// unless the manifest names its namespace, deletes it when the test ends, and returns it as
// created.
func CreateFromFile(tb testing.TB, c client.Client, path, ns string) *unstructured.Unstructured {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	if u.GetNamespace() == "" {
		u.SetNamespace(ns)
	}
	if err := c.Create(context.Background(), u); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	tb.Cleanup(func() { _ = c.Delete(context.Background(), u) })
	return u
}

// Must fails tb at once on err: the one-line check of a setup step (creating an object,
// patching a status) that the rest of a test depends on.
func Must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
