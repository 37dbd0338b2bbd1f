package pages

import (
	"errors"
	"slices"
	"testing"
)

// check verifies the pool's invariants: every page is free or held, each
// page's count is the number of sequences holding it, no page is free
// twice, and a sequence holds a page at most once.
func check(t *testing.T, p *Pool) {
	t.Helper()
	held := make([]int, len(p.refs))
	for b, pages := range p.of {
		seen := map[int]bool{}
		for _, pg := range pages {
			if seen[pg] {
				t.Fatalf("sequence %d holds page %d twice: %v", b, pg, pages)
			}
			seen[pg] = true
			held[pg]++
		}
	}
	free := map[int]bool{}
	for _, pg := range p.free {
		if free[pg] || held[pg] != 0 {
			t.Fatalf("page %d free twice or while held (%d): free %v", pg, held[pg], p.free)
		}
		free[pg] = true
	}
	for pg, n := range held {
		if p.refs[pg] != n || (n == 0) != free[pg] {
			t.Fatalf("page %d: %d refs, held by %d, free %v", pg, p.refs[pg], n, free[pg])
		}
	}
	if p.Free()+p.InUse() != len(p.refs) {
		t.Fatalf("%d free + %d in use, pool of %d", p.Free(), p.InUse(), len(p.refs))
	}
}

func noCopy(from, to int) error { panic("no copy expected") }

func TestAllocationCoversEachSequence(t *testing.T) {
	p := New(8, 4, 2)
	lens := []int{0, 0}
	for _, step := range []struct{ seqs []int }{{[]int{0}}, {[]int{0, 1}}, {[]int{1}}} {
		need, cow := p.Plan(step.seqs, lens, 5)
		if len(cow) != 0 {
			t.Fatalf("copy on write %v with nothing shared", cow)
		}
		free := p.Free()
		if err := p.Grow(step.seqs, lens, 5, noCopy); err != nil {
			t.Fatal(err)
		}
		if p.Free() != free-need {
			t.Fatalf("took %d pages, planned %d", free-p.Free(), need)
		}
		for _, b := range step.seqs {
			lens[b] += 5
		}
		check(t, p)
	}
	// Lengths 10 and 10: 3 pages of 4 each.
	for b, n := range lens {
		if len(p.Of(b)) != (n+3)/4 {
			t.Errorf("sequence %d of length %d holds %d pages", b, n, len(p.Of(b)))
		}
	}
	if p.Page(1, 9) != p.Of(1)[2] {
		t.Errorf("position 9 of sequence 1 on page %d, its pages %v", p.Page(1, 9), p.Of(1))
	}
}

func TestForkSharesThenCopiesOnWrite(t *testing.T) {
	p := New(8, 4, 3)
	lens := []int{6, 0, 0}
	if err := p.Grow([]int{0}, []int{0, 0, 0}, 6, noCopy); err != nil {
		t.Fatal(err)
	}
	p.Fork(0, 1)
	p.Fork(0, 2)
	lens[1], lens[2] = 6, 6
	check(t, p)
	if p.InUse() != 2 || p.Refs(p.Of(0)[0]) != 3 || !slices.Equal(p.Of(0), p.Of(1)) {
		t.Fatalf("after two forks: %d in use, refs %d, pages %v %v", p.InUse(), p.Refs(p.Of(0)[0]), p.Of(0), p.Of(1))
	}
	// Sequence 1 writes into the shared, partly filled page 2 of 2: a copy.
	need, cow := p.Plan([]int{1}, lens, 1)
	if need != 1 || !slices.Equal(cow, []int{1}) {
		t.Fatalf("plan: %d pages, copy on write %v; want 1 and [1]", need, cow)
	}
	shared := p.Of(1)[1]
	var copied [][2]int
	if err := p.Grow([]int{1}, lens, 1, func(from, to int) error { copied = append(copied, [2]int{from, to}); return nil }); err != nil {
		t.Fatal(err)
	}
	lens[1]++
	check(t, p)
	if len(copied) != 1 || copied[0][0] != shared || copied[0][1] != p.Of(1)[1] || p.Of(1)[0] != p.Of(0)[0] {
		t.Fatalf("copies %v; pages %v and %v", copied, p.Of(0), p.Of(1))
	}
	if p.Refs(shared) != 2 || p.Refs(p.Of(1)[0]) != 3 {
		t.Errorf("refs: shared last page %d, first page %d; want 2 and 3", p.Refs(shared), p.Refs(p.Of(1)[0]))
	}
	// Full shared pages are never copied: a sequence whose length ends a
	// page takes a new one.
	p.Fork(0, 2)
	need, cow = p.Plan([]int{0}, []int{8, 7, 6}, 2)
	if need != 1 || len(cow) != 0 {
		t.Fatalf("plan at a page boundary: %d pages, copy on write %v; want 1 and none", need, cow)
	}
	check(t, p)
}

func TestFailedCopyLeavesThePool(t *testing.T) {
	p := New(4, 4, 2)
	if err := p.Grow([]int{0}, []int{0, 0}, 2, noCopy); err != nil {
		t.Fatal(err)
	}
	p.Fork(0, 1)
	before := p.Clone()
	boom := errors.New("copy failed")
	if err := p.Grow([]int{1}, []int{2, 2}, 1, func(int, int) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("grow: %v", err)
	}
	check(t, p)
	if p.Free() != before.Free() || !slices.Equal(p.Of(1), before.Of(1)) {
		t.Errorf("after a failed copy: %d free, pages %v; before %d, %v", p.Free(), p.Of(1), before.Free(), before.Of(1))
	}
}

func TestTruncateAndResetReturnPages(t *testing.T) {
	p := New(6, 2, 2)
	if err := p.Grow([]int{0, 1}, []int{0, 0}, 5, noCopy); err != nil {
		t.Fatal(err)
	}
	p.Fork(0, 1) // sequence 1's own pages go back
	check(t, p)
	if p.InUse() != 3 {
		t.Fatalf("%d pages in use after the fork, want 3", p.InUse())
	}
	p.Truncate(0, 3) // keeps 2 pages; the third is still sequence 1's
	check(t, p)
	if len(p.Of(0)) != 2 || p.InUse() != 3 {
		t.Fatalf("after truncating 0 to 3: pages %v, %d in use", p.Of(0), p.InUse())
	}
	for b := range 2 {
		p.Truncate(b, 0) // Reset
	}
	check(t, p)
	if p.InUse() != 0 || p.Free() != 6 {
		t.Errorf("after reset: %d in use, %d free", p.InUse(), p.Free())
	}
}

func TestExhaustionRefusesAndChangesNothing(t *testing.T) {
	p := New(3, 4, 2)
	if err := p.Grow([]int{0}, []int{0, 0}, 8, noCopy); err != nil {
		t.Fatal(err)
	}
	before := p.Clone()
	need, _ := p.Plan([]int{0, 1}, []int{8, 0}, 4)
	if need != 2 {
		t.Fatalf("need %d pages, want 2", need)
	}
	if err := p.Grow([]int{0, 1}, []int{8, 0}, 4, noCopy); err == nil {
		t.Fatal("grew past the pool")
	}
	check(t, p)
	if p.Free() != before.Free() || !slices.Equal(p.Of(0), before.Of(0)) || len(p.Of(1)) != 0 {
		t.Errorf("a refused grow changed the pool: %d free, %v, %v", p.Free(), p.Of(0), p.Of(1))
	}
	if table := p.Table(3); !slices.Equal(table, []int{p.Of(0)[0], p.Of(0)[1], 0, 0, 0, 0}) {
		t.Errorf("table %v", table)
	}
}
