// Package reference is a float64, deliberately naive implementation of
// vkattn's attention semantics (SEMANTICS.md §1–§7). Every GPU result is checked
// against it, so it favours obvious correctness over speed: it materialises
// every score row, applies every mask explicitly and always returns the
// attention weights and the log-sum-exp.
//
// It validates inputs with vkattn.CheckProblem, exactly like the GPU path, so
// both accept and reject the same problems. A row whose every key is masked
// (or whose query lies past its query length) has output 0, log-sum-exp -Inf
// and all-zero weights, never NaN; with attention sinks a fully masked row's
// log-sum-exp is its head's sink instead (§4.1).
package reference
