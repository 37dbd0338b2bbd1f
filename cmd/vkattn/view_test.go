package main

import (
	"strings"
	"testing"
)

func TestViewHelp(t *testing.T) {
	out, _, code := cli(t, "view", "-h")
	for _, want := range []string{"Keys:", "next / previous head", "Example", "Flags:", "-tags viewer", "Xvfb", "--causal"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("view -h: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
}

func TestParseSize(t *testing.T) {
	for s, want := range map[string][2]int{"800x600": {800, 600}, "12X7": {12, 7}} {
		if w, h, ok := parseSize(s); !ok || w != want[0] || h != want[1] {
			t.Errorf("parseSize(%q) = %d, %d, %v", s, w, h, ok)
		}
	}
	for _, s := range []string{"", "800", "0x5", "ax5", "5x-1", "99999x2"} {
		if _, _, ok := parseSize(s); ok {
			t.Errorf("parseSize(%q) accepted", s)
		}
	}
}
