// Package harness is the benchmark harness of `vkattn bench` and the runs
// of `vkattn decode`: the problem cases and suites with their FLOP and
// traffic counts, the KV-cache suites (a decode loop, forks, a server's
// ragged steps), the cascade suite, and a sequence decoded through a KV
// cache token by token or by a schedule of ragged steps. It times calls
// through package tune's primitives (tune.TimeRuns, tune.Clock), and tune,
// the tuning search, needs none of it.
package harness
