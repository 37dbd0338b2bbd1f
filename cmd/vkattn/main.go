// Command vkattn runs attention on a Vulkan device from the command line:
// list devices, run a problem stored as .npy files, run a PyTorch
// nn.MultiheadAttention layer or additive (Bahdanau) attention with weights
// from a .npz or .safetensors file, verify the golden cases, show the worked
// examples of SEMANTICS.md §18, benchmark the kernel and tune its launch shapes for
// the device.
//
//	vkattn devices [--json]
//	vkattn run -q Q.npy -k K.npy -v V.npy [-o O.npy] [options]
//	vkattn grad -q Q.npy -k K.npy -v V.npy --dout DO.npy --dq DQ.npy --dk DK.npy --dv DV.npy [options]
//	vkattn mha -x X.npy [--kv KV.npy] --params P.npz --heads H -o OUT.npy [options]
//	vkattn additive -q Q.npy -k K.npy -v V.npy --params P.npz [-o O.npy] [options]
//	vkattn verify [--dir testdata]
//	vkattn demo
//	vkattn bench [--suite prefill|decode|long|all | --shape B,H,H_kv,L,S,d] [--json] [--plot FILE.png]
//	vkattn tune [--device N|NAME] [--d 64,128] [--reps N] [--dry-run] [--json]
//	vkattn heatmap --weights W.npy -o HEAT.png [--heads 0,3] [--contribution V.npy]
//	vkattn merge [-o O.npy] [--lse LSE.npy] PART.npz|O.npy,LSE.npy...
//	vkattn view -q Q.npy -k K.npy -v V.npy [masks as run] (built with -tags viewer)
//
// Every subcommand explains itself with -h.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/vkattn/vkattn"
)

func main() {
	catchSignals(os.Stderr)
	os.Exit(exitStatus(run(os.Args[1:], os.Stdout, os.Stderr)))
}

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and failed: bad input, device error, check failed
	exitUsage = 2 // the command line itself is wrong
)

const topUsage = `vkattn runs scaled dot-product attention, multi-head attention layers and
additive attention on a Vulkan device (GPU or the lavapipe CPU driver) and
checks them against a float64 reference.

Usage:
  vkattn <command> [flags]

Commands:
  devices   list Vulkan devices, their limits and the default pick
  run       run attention on Q, K, V stored as .npy files
  grad      its gradients dQ, dK, dV (and dSinks) for a given dO, on the device
  saturation  the 1/sqrt(d_k) argument measured: weights and gradients against d_k
  mha       run a PyTorch nn.MultiheadAttention layer (weights from .npz/.safetensors)
  additive  run additive (Bahdanau) attention with weights W_q, W_k, b, w_a
  verify    run the golden cases in testdata/ and compare
  demo      print the worked examples of SEMANTICS.md §18 and a larger random problem
  decode    a generation loop through a KV cache: prefill, then one token a step
  bench     time attention on preset suites or given shapes (GFLOP/s, GB/s, plot)
  tune      measure the kernel's launch shapes on this device and save the fastest
  heatmap   draw attention weights (or a_ij*||v_j||) as heat maps: PNG, SVG or PDF
  merge     merge partial attentions (O and LSE over parts of the keys) into one
  view      a window showing one head's weights, drawn from the device (keys n, p, b, c, q)

Run 'vkattn <command> -h' for a command's flags and an example.

Examples:
  vkattn run -q q.npy -k k.npy -v v.npy --causal bottom-right -o out.npy --check
  vkattn mha -x x.npy --params mha.safetensors --heads 2 -o out.npy --check
  vkattn bench --suite prefill --plot gflops.png
  vkattn tune --d 64,128
  vkattn heatmap --weights w.npy -o heat.png
`

type command struct {
	name string
	run  func(args []string, stdout, stderr io.Writer) int
}

var commands = []command{
	{"devices", runDevices},
	{"run", runRun},
	{"grad", runGrad},
	{"saturation", runSaturation},
	{"mha", runMHA},
	{"additive", runAdditive},
	{"verify", runVerify},
	{"demo", runDemo},
	{"decode", runDecode},
	{"bench", runBench},
	{"tune", runTune},
	{"heatmap", runHeatmap},
	{"merge", runMerge},
	{"view", runView},
}

// run is main without the process: tests call it in-process.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			// "vkattn help run" is "vkattn run -h".
			return run([]string{args[1], "-h"}, stdout, stderr)
		}
		fmt.Fprint(stdout, topUsage)
		return exitOK
	}
	for _, c := range commands {
		if c.name == args[0] {
			// With VKATTN_VALIDATION=1 the validation layer's messages are
			// collected process-wide; show the ones this command caused.
			before := len(vkattn.ValidationMessages())
			code := c.run(args[1:], stdout, stderr)
			for _, m := range vkattn.ValidationMessages()[before:] {
				fmt.Fprintf(stderr, "vkattn %s: validation: %s\n", c.name, m)
			}
			return code
		}
	}
	fmt.Fprintf(stderr, "vkattn: unknown command %q\n\n%s", args[0], topUsage)
	return exitUsage
}

// newFlags makes a flag set whose errors go to stderr; parseFlags prints
// its usage (a paragraph and an example, then the flags) to stdout on -h.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("vkattn "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // parseFlags prints usage itself, to the right stream
	return fs
}

// emitResults prints results as a JSON array ([] for none) when asJSON,
// else with table: the two outputs of the commands that measure.
func emitResults[T any](w io.Writer, asJSON bool, results []T, table func()) error {
	if !asJSON {
		table()
		return nil
	}
	if results == nil {
		results = []T{}
	}
	return printJSON(w, results)
}

// openInterruptible opens the device a command names, with a context that
// the first signal cancels (interruptible, which note describes); done
// closes both. code is exitOK, or what to exit with.
func openInterruptible(cmd string, device deviceChoice, stderr io.Writer, note func() string) (dev *vkattn.Device, ctx context.Context, done func(), code int) {
	dev, err := vkattn.Open(device.with(vkattn.Config{}))
	if err != nil {
		return nil, nil, nil, failf(stderr, cmd, "%v", err)
	}
	ctx, stop := interruptible(cmd, note)
	return dev, ctx, func() { stop(); dev.Close() }, exitOK
}

// printJSON writes v as indented JSON, the --json output of every command.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// deviceChoice is the device a command opens and the vendor it plans as.
type deviceChoice struct{ name, planAs string }

// with is cfg on the chosen device, planned as chosen.
func (c deviceChoice) with(cfg vkattn.Config) vkattn.Config {
	cfg.Device, cfg.PlanAs = c.name, c.planAs
	return cfg
}

// deviceFlag registers --device and --plan-as, the device choice of every
// command that opens one, into device.
func deviceFlag(fs *flag.FlagSet, device *deviceChoice) {
	fs.StringVar(&device.name, "device", "", "device `N|NAME`: index or part of its name (see 'vkattn devices'); default: the best one")
	fs.Func("plan-as", "plan as the quirk table says for `VENDOR` ("+strings.Join(vkattn.PlanAsVendors, ", ")+
		") on whatever device runs, e.g. the GPU kernels on lavapipe; default: $VKATTN_PLAN_AS, else the device's own", func(v string) error {
		if !slices.Contains(vkattn.PlanAsVendors, v) {
			return fmt.Errorf("unknown vendor %q to plan as (want one of %s)", v, strings.Join(vkattn.PlanAsVendors, ", "))
		}
		device.planAs = v
		return nil
	})
}

// checkFlags are --check and --explain, of the commands that run attention
// (run, mha, additive).
type checkFlags struct{ check, explain bool }

// register adds the flags; plan says what --explain prints.
func (c *checkFlags) register(fs *flag.FlagSet, plan string) {
	fs.BoolVar(&c.check, "check", false, "compare with the float64 reference; exit 1 if it disagrees")
	fs.BoolVar(&c.explain, "explain", false, "print the plan: "+plan)
}

// explainTo is where --explain prints the plan: w, or nil without it.
func (c checkFlags) explainTo(w io.Writer) io.Writer {
	if c.explain {
		return w
	}
	return nil
}

// parseFlags parses args and reports whether the command should go on; if
// not, code is the exit status (0 after -h).
func parseFlags(fs *flag.FlagSet, usage string, args []string, stdout, stderr io.Writer) (ok bool, code int) {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		fmt.Fprintln(stdout, "\nFlags:")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
		return false, exitOK
	}
	if err != nil {
		// flag has already printed what was wrong.
		fmt.Fprintf(stderr, "run '%s -h' for usage\n", fs.Name())
		return false, exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q (every input is given by a flag; run '%s -h')\n",
			fs.Name(), fs.Arg(0), fs.Name())
		return false, exitUsage
	}
	return true, exitOK
}

// parseInputFlags is parseFlags for a command that reads Q, K and V: it
// also refuses a call that does not name all three.
func parseInputFlags(fs *flag.FlagSet, usage string, args []string, stdout, stderr io.Writer, in *qkvFlags) (ok bool, code int) {
	if ok, code := parseFlags(fs, usage, args, stdout, stderr); !ok {
		return ok, code
	}
	if in.missing() {
		return false, usagef(stderr, strings.TrimPrefix(fs.Name(), "vkattn "), "-q, -k and -v are required")
	}
	return true, exitOK
}

// failf reports an error on stderr and returns exitFail.
func failf(stderr io.Writer, cmd, format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintf(stderr, "vkattn %s: %s\n", cmd, strings.TrimSuffix(msg, "\n"))
	return exitFail
}

// usagef reports a command-line mistake on stderr and returns exitUsage.
func usagef(stderr io.Writer, cmd, format string, args ...any) int {
	fmt.Fprintf(stderr, "vkattn %s: %s\nrun 'vkattn %s -h' for usage\n", cmd, fmt.Sprintf(format, args...), cmd)
	return exitUsage
}
