package pipelines

import "github.com/vkattn/vkattn/core"

// ElementWorkGroup is the workgroup size of the elementwise kernels
// (rope.comp, q8_store.comp, attention_merge.comp).
const ElementWorkGroup = 64

// ropeBindingTypes are rope.comp's bindings: X, Y, the table, lengths.
func ropeBindingTypes() []core.BindingType {
	return []core.BindingType{ropeBindX: core.StorageBuffer, ropeBindY: core.StorageBuffer, ropeBindTable: core.StorageBuffer, ropeBindLengths: core.StorageBuffer}
}

// Grid lays n invocations of ElementWorkGroup lanes out in rows of at most
// the device's x extent of workgroups (65,535 on every device), as many
// rows as needed: the kernel's index is x + y * cols * ElementWorkGroup.
func Grid(dev core.DeviceInfo, what string, n int) (cols, rows int, err error) {
	groups := (n + ElementWorkGroup - 1) / ElementWorkGroup
	cols = min(groups, int(dev.Limits.MaxWorkGroupCount[0]))
	rows = (groups + cols - 1) / cols
	if rows > int(dev.Limits.MaxWorkGroupCount[1]) {
		return 0, 0, Limitf("%s of %d invocations needs %d x %d workgroups, beyond the device's grid", what, n, cols, rows)
	}
	return cols, rows, nil
}

// mergeBindingTypes are attention_merge.comp's bindings: the part's O and
// LSE, the merged O and LSE, the compensated sums.
func mergeBindingTypes() []core.BindingType {
	return []core.BindingType{mergeBindPartO: core.StorageBuffer, mergeBindPartLSE: core.StorageBuffer,
		mergeBindO: core.StorageBuffer, mergeBindLSE: core.StorageBuffer, mergeBindSums: core.StorageBuffer}
}

// q8StoreBindingTypes are q8_store.comp's bindings: X, Y, the rows'
// destinations, the overflow status.
func q8StoreBindingTypes() []core.BindingType {
	return []core.BindingType{q8BindX: core.StorageBuffer, q8BindY: core.StorageBuffer, q8BindRows: core.StorageBuffer, q8BindStatus: core.StorageBuffer}
}

// RoPEKernel is the rotary embedding of rows of type t.
func RoPEKernel(t core.DType) KernelSpec {
	return KernelSpec{Variant: Variant{Family: FamilyRoPE}, Bindings: ropeBindingTypes(), Push: blockSize(RoPEPush{}), Spec: ropeSpec{WorkGroup: ElementWorkGroup, XType: typeSpec(t)}.constants()}
}

// MergeKernel is the merge of partial attentions.
func MergeKernel() KernelSpec {
	return KernelSpec{Variant: Variant{Family: FamilyMerge}, Bindings: mergeBindingTypes(), Push: blockSize(MergePush{}), Spec: mergeSpec{WorkGroup: ElementWorkGroup}.constants()}
}

// Q8StoreKernel is the quantization of rows of type x into y, q8_0 or
// q4_0 (q8_store.comp reads the output type as a specialization
// constant: one SPIR-V for both).
func Q8StoreKernel(x, y core.DType) KernelSpec {
	return KernelSpec{Variant: Variant{Family: FamilyQ8Store}, Bindings: q8StoreBindingTypes(), Push: blockSize(Q8StorePush{}), Spec: q8StoreSpec{WorkGroup: ElementWorkGroup, XType: typeSpec(x), YType: typeSpec(y)}.constants()}
}
