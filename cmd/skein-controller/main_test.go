package main

import (
	"strings"
	"testing"
)

func TestParsePrefixes(t *testing.T) {
	got, err := parsePrefixes("pod-cidrs", "10.244.0.0/16, 10.245.0.0/16, fd00:10:244::/56,")
	if err != nil || len(got) != 3 || got[1].String() != "10.245.0.0/16" || got[2].String() != "fd00:10:244::/56" {
		t.Errorf("parsePrefixes: %v, %v", got, err)
	}
	for in, want := range map[string]string{
		"10.244.1.0/16":       `--pod-cidrs: "10.244.1.0/16" has host bits set (did you mean 10.244.0.0/16?)`,
		"10.244.0.0":          `--pod-cidrs: "10.244.0.0" is not an IPv4 or IPv6 CIDR`,
		"::ffff:10.0.0.0/104": `--pod-cidrs: "::ffff:10.0.0.0/104" is not an IPv4 or IPv6 CIDR`,
		"fd00:10:244::1/56":   `--pod-cidrs: "fd00:10:244::1/56" has host bits set (did you mean fd00:10:244::/56?)`,
	} {
		if _, err := parsePrefixes("pod-cidrs", in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parsePrefixes(%q): %v, want %q", in, err, want)
		}
	}
}
