package main

import (
	"strings"
	"testing"
)

func TestParsePrefixes(t *testing.T) {
	got, err := parsePrefixes("pod-cidrs", "10.244.0.0/16, 10.245.0.0/16,")
	if err != nil || len(got) != 2 || got[1].String() != "10.245.0.0/16" {
		t.Errorf("parsePrefixes: %v, %v", got, err)
	}
	for in, want := range map[string]string{
		"10.244.1.0/16": `--pod-cidrs: "10.244.1.0/16" has host bits set (did you mean 10.244.0.0/16?)`,
		"10.244.0.0":    `--pod-cidrs: "10.244.0.0" is not an IPv4 CIDR`,
		"fd00::/64":     `--pod-cidrs: "fd00::/64" is not an IPv4 CIDR`,
	} {
		if _, err := parsePrefixes("pod-cidrs", in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parsePrefixes(%q): %v, want %q", in, err, want)
		}
	}
}
