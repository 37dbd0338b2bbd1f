// Package faults holds the fault-injection sweep: every Vulkan call that
// representative work makes is made to fail in turn (vk.SetFault), and
// what vkattn does after it is checked. A package of its own: a fault is
// process-wide, so nothing else may run beside the sweep.
package faults
