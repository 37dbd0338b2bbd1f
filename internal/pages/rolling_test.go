package pages

import (
	"slices"
	"testing"
)

// A rolling sequence lets go of its oldest pages as it grows: over 1,000
// one-position appends with a window of 10 positions in pages of 4, it
// holds at most 4 pages, each position at or above the first kept one is
// on the page it was written to (Page through First), the table lists the
// kept pages from the first, and the pool never runs out. A fork copies
// First; Truncate to 0 puts it back at 0.
func TestDropBelowRollsOverTheWindow(t *testing.T) {
	const size, window, seqs = 4, 10, 2
	p := New(10, size, seqs)
	lens := make([]int, seqs)
	written := map[[2]int]int{} // (sequence, position) -> page written to
	for step := 0; step < 1000; step++ {
		b := step % seqs
		p.DropBelow(b, lens[b]-window+1)
		if err := p.Grow([]int{b}, lens, 1, noCopy); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		written[[2]int{b, lens[b]}] = p.Page(b, lens[b])
		lens[b]++
		check(t, p)
		start := p.First(b) * size
		if start > max(0, lens[b]-window) || start%size != 0 {
			t.Fatalf("step %d: sequence %d of length %d keeps from %d, want a page start at most %d", step, b, lens[b], start, max(0, lens[b]-window))
		}
		if held := len(p.Of(b)); held > (window+size-1+size-1)/size {
			t.Fatalf("step %d: sequence %d holds %d pages", step, b, held)
		}
		for pos := start; pos < lens[b]; pos++ {
			if got, want := p.Page(b, pos), written[[2]int{b, pos}]; got != want {
				t.Fatalf("step %d: position %d of sequence %d on page %d, written to %d", step, pos, b, got, want)
			}
		}
	}
	perItem := 4
	table := p.Table(perItem)
	for b := range seqs {
		if row := table[b*perItem : b*perItem+len(p.Of(b))]; !slices.Equal(row, p.Of(b)) {
			t.Errorf("table row %d %v, pages %v", b, row, p.Of(b))
		}
	}
	p.Fork(0, 1)
	check(t, p)
	if p.First(1) != p.First(0) || p.Page(1, lens[0]-1) != p.Page(0, lens[0]-1) {
		t.Errorf("fork: first %d and %d", p.First(1), p.First(0))
	}
	// Truncate within the kept pages lets go of the later ones only.
	first := p.First(0)
	p.Truncate(0, first*size+1)
	check(t, p)
	if p.First(0) != first || len(p.Of(0)) != 1 {
		t.Errorf("truncated to one kept position: first %d (was %d), pages %v", p.First(0), first, p.Of(0))
	}
	for b := range seqs {
		p.Truncate(b, 0)
	}
	check(t, p)
	if p.InUse() != 0 || p.First(0) != 0 || p.First(1) != 0 {
		t.Errorf("after reset: %d in use, first %d and %d", p.InUse(), p.First(0), p.First(1))
	}
}
