package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/vkattn/vkattn/internal/harness"
)

// cacheSuite is the shape of bench's decode-loop and fork suites (the
// tests shrink it).
var cacheSuite = harness.DefaultCacheSuite

// printLoopTable writes the decode-loop results as a table.
func printLoopTable(w io.Writer, device string, rs []harness.LoopResult) {
	fmt.Fprintf(w, "device: %s\ndecode steps, H=%d H_kv=%d d=%d B=1: append one token, attend with its query, read O back (median of the timed steps; counts per step)\n", device, cacheSuite.H, cacheSuite.HKV, cacheSuite.D)
	if len(rs) > 0 && rs[0].RoPE != "" {
		fmt.Fprintf(w, "RoPE: %s (keys rotated on append, each query on the device)\n", rs[0].RoPE)
	}
	rows := [][]string{{"length", "capacity", "layout", "dtype", "B/token", "kernel", "cold", "step", "gpu", "steps/s", "cache GB/s", "allocs", "submits", "waits", "staged"}}
	for _, r := range rs {
		gpu, gbps := "n/a", "n/a"
		if r.GPUNS > 0 {
			gpu, gbps = durString(time.Duration(r.GPUNS)), rate(r.GBPS)
		}
		rows = append(rows, []string{strconv.Itoa(r.Length), strconv.Itoa(r.Capacity), r.Cache, r.DType, strconv.Itoa(r.BytesPerToken), r.Variant, durString(time.Duration(r.ColdWallNS)),
			durString(time.Duration(r.StepNS)), gpu, rate(r.StepsPerS), gbps, strconv.Itoa(r.Allocs),
			strconv.FormatFloat(r.Submits, 'g', 3, 64), strconv.FormatFloat(r.Waits, 'g', 3, 64), strconv.FormatFloat(r.StagingBytes, 'f', 0, 64)})
	}
	printAligned(w, rows, map[int]bool{2: true, 3: true, 5: true})
}
