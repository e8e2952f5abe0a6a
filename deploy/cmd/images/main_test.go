package main

import (
	"strings"
	"testing"
)

// TestCheckRegistry: a --registry that cannot name repositories is refused before anything is
// built, saying what to write instead.
func TestCheckRegistry(t *testing.T) {
	for _, ok := range []string{"ghcr.io/skein-net", "10.255.0.1:5000/skein-net", "registry.example/a/b/"} {
		if err := checkRegistry(ok, false); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for in, want := range map[string]string{
		"":                      "--push needs --registry",
		"https://ghcr.io/skein": "without a scheme",
		"ghcr.io/Skein":         "lower case",
		"ghcr.io/a b":           "is not host[:port]/path",
	} {
		if err := checkRegistry(in, false); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", in, err, want)
		}
	}
}
