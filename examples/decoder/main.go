// Command decoder runs a small Llama-style decoder-only transformer on a
// Vulkan device of its own, made with vulkan-go: its own compute kernels
// (shaders/*.comp) do the embedding, the norms, the projections, RoPE and
// the feed-forward, and vkattn, opened on the same device (OpenOn), does
// the attention over a KV cache per layer, reading and writing the
// program's buffers in place (TensorOver). All of one token's work is
// recorded into one command buffer, submitted once and waited for once.
//
// From the repository's root:
//
//	go run ./examples/decoder                  # the reference prompt, 24 greedy tokens
//	go run ./examples/decoder -prompt 1,2,3 -n 10
//
// The weights (testdata/decoder/model.safetensors) and the expected tokens
// and logits (reference.json) come from tools/decoder_reference.py.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/vkattn/vkattn"
)

func main() {
	weightsPath := flag.String("weights", "testdata/decoder/model.safetensors", "the model's weights (.safetensors or .npz)")
	promptText := flag.String("prompt", "127,68,227,80,231,16,17,92", "the prompt's token ids, comma-separated; the default is testdata/decoder/reference.json's prompt")
	n := flag.Int("n", 24, "how many tokens to generate")
	planAs := flag.String("plan-as", "", "plan vkattn's kernels as another vendor's driver would: nvidia, amd or intel (\"\": the device's own)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: decoder [flags]\n\nPrints the greedy continuation of a prompt by the tiny Llama-style model of testdata/decoder.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*weightsPath, *promptText, *n, *planAs); err != nil {
		fmt.Fprintln(os.Stderr, "decoder:", err)
		os.Exit(1)
	}
}

func run(weightsPath, promptText string, n int, planAs string) error {
	prompt, err := parseTokens(promptText)
	if err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("-n %d: want at least 1", n)
	}
	if steps := len(prompt) + n - 1; steps > TinyLlama.Capacity {
		return fmt.Errorf("%d prompt tokens and %d to generate take %d positions; the model holds %d", len(prompt), n, steps, TinyLlama.Capacity)
	}
	cfg := vkattn.Config{PlanAs: planAs}
	m, err := Open(weightsPath, TinyLlama, cfg)
	if err != nil {
		return err
	}
	defer m.Close()
	before := m.Attn.Stats() // after loading: the caches' setup is vkattn's own work
	out, err := m.Generate(prompt, n)
	if err != nil {
		return err
	}
	attn := m.Attn.Stats().Since(before)
	fmt.Println("device:   ", m.Host.Name)
	fmt.Println("prompt:   ", joinInts(prompt))
	fmt.Println("generated:", joinInts(out))
	fmt.Printf("%d positions: %d submissions and %d waits by the host, %d and %d by vkattn\n",
		m.Pos(), m.Host.Submits, m.Host.Waits, attn.Submits, attn.Waits)
	return m.Close()
}

// parseTokens reads comma-separated token ids.
func parseTokens(s string) ([]int, error) {
	var ids []int
	for _, f := range strings.Split(s, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("-prompt %q: %q is not a token id", s, f)
		}
		if id < 0 || id >= TinyLlama.Vocab {
			return nil, fmt.Errorf("-prompt %q: token %d is not in 0 to %d", s, id, TinyLlama.Vocab-1)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, " ")
}
