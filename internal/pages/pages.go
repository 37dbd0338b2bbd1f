// Package pages is a paged KV cache's page allocator, on the host and
// device-free: which pages of a fixed pool each sequence holds, in
// position order, and how many sequences hold each page. Sequences share
// pages after a fork; the first append into a shared, partly filled page
// gives the appending sequence a copy of its own (copy on write); a page
// goes back to the pool when no sequence holds it. A rolling cache lets
// go of a sequence's oldest pages (DropBelow): its pages then start at a
// later logical page, First.
package pages

import (
	"fmt"
	"slices"
)

// Pool is the allocator of pool pages of size positions each for
// sequences sequences. Its methods are not safe for concurrent use.
type Pool struct {
	size int
	free []int   // pages no sequence holds, the next taken last
	refs []int   // sequences holding each page
	of   [][]int // each sequence's pages, in position order
	// first is each sequence's logical page held in of[b][0]: the pages
	// before it were let go (DropBelow).
	first []int
}

// New is a pool of pages pages of size positions for sequences sequences,
// all free.
func New(pages, size, sequences int) *Pool {
	p := &Pool{size: size, refs: make([]int, pages), of: make([][]int, sequences), first: make([]int, sequences)}
	for i := pages - 1; i >= 0; i-- {
		p.free = append(p.free, i) // page 0 is taken first
	}
	return p
}

// Of is sequence b's pages in position order, from logical page First(b)
// (the pool's own slice: not to be changed).
func (p *Pool) Of(b int) []int { return p.of[b] }

// First is the logical page of sequence b's first page held: positions
// below First(b) * size were let go.
func (p *Pool) First(b int) int { return p.first[b] }

// Page is the page holding position pos of sequence b (pos at or above
// First(b) * size).
func (p *Pool) Page(b, pos int) int { return p.of[b][pos/p.size-p.first[b]] }

// Free is how many pages no sequence holds; InUse how many some do
// (shared pages once).
func (p *Pool) Free() int  { return len(p.free) }
func (p *Pool) InUse() int { return len(p.refs) - len(p.free) }

// Refs is how many sequences hold page pg.
func (p *Pool) Refs(pg int) int { return p.refs[pg] }

// Plan is what appending n positions to each of the sequences seqs, whose
// lengths are lens (by sequence), takes: need new pages, of which one for
// each sequence in cow, whose partly filled last page is shared and is
// copied before it is written.
func (p *Pool) Plan(seqs, lens []int, n int) (need int, cow []int) {
	for _, b := range seqs {
		need += (lens[b]+n+p.size-1)/p.size - p.first[b] - len(p.of[b])
		if n > 0 && lens[b]%p.size != 0 && p.refs[p.of[b][len(p.of[b])-1]] > 1 {
			need++
			cow = append(cow, b)
		}
	}
	return need, cow
}

// Grow makes room for n more positions in each of seqs (lengths lens, by
// sequence), as Plan plans it: each sequence whose partly filled last page
// is shared first trades it for a copy (copyPage(from, to) copies it; an
// error leaves the pool as it was before that sequence), then every
// sequence takes pages until its pages cover its new length. A pool
// without the pages Plan counts is an error, the pool unchanged.
func (p *Pool) Grow(seqs, lens []int, n int, copyPage func(from, to int) error) error {
	need, cow := p.Plan(seqs, lens, n)
	if need > len(p.free) {
		return fmt.Errorf("pages: %d more pages needed, %d of the pool's %d are free", need, len(p.free), len(p.refs))
	}
	for _, b := range cow {
		last := len(p.of[b]) - 1
		old, own := p.of[b][last], p.take()
		if err := copyPage(old, own); err != nil {
			p.drop(own)
			return err
		}
		p.drop(old)
		p.of[b][last] = own
	}
	for _, b := range seqs {
		for (p.first[b]+len(p.of[b]))*p.size < lens[b]+n {
			p.of[b] = append(p.of[b], p.take())
		}
	}
	return nil
}

// Truncate keeps the pages of sequence b that cover its first n
// positions and lets go of the rest; n is 0 (which also puts First back
// at 0) or at least First(b) * size.
func (p *Pool) Truncate(b, n int) {
	keep := max(0, (n+p.size-1)/p.size-p.first[b])
	for _, pg := range p.of[b][keep:] {
		p.drop(pg)
	}
	p.of[b] = p.of[b][:keep]
	if n == 0 {
		p.first[b] = 0
	}
}

// DropBelow lets go of sequence b's pages whose positions all lie below
// pos (a rolling cache's positions no window reaches any more); First
// moves past them. The pages held move to the front of b's slice in
// place, so a sequence that rolls on takes no new memory.
func (p *Pool) DropBelow(b, pos int) {
	k := min(max(0, pos/p.size-p.first[b]), len(p.of[b]))
	if k == 0 {
		return
	}
	for _, pg := range p.of[b][:k] {
		p.drop(pg)
	}
	p.of[b] = append(p.of[b][:0], p.of[b][k:]...)
	p.first[b] += k
}

// Fork makes sequence dst hold src's pages, shared, after letting go of
// its own; src == dst changes nothing.
func (p *Pool) Fork(src, dst int) {
	if src == dst {
		return
	}
	for _, pg := range p.of[src] {
		p.refs[pg]++ // first: dst may already share them
	}
	for _, pg := range p.of[dst] {
		p.drop(pg)
	}
	p.of[dst] = slices.Clone(p.of[src])
	p.first[dst] = p.first[src]
}

// Table is the page table: perItem entries a sequence, its pages first
// (entry i holds logical page First(b) + i), the unused entries 0.
func (p *Pool) Table(perItem int) []int {
	table := make([]int, len(p.of)*perItem)
	for b, pages := range p.of {
		copy(table[b*perItem:], pages)
	}
	return table
}

// Clone is a copy of p that shares nothing with it (to put back after a
// failed append).
func (p *Pool) Clone() *Pool {
	c := &Pool{size: p.size, free: slices.Clone(p.free), refs: slices.Clone(p.refs), of: make([][]int, len(p.of)), first: slices.Clone(p.first)}
	for i, x := range p.of {
		c.of[i] = slices.Clone(x)
	}
	return c
}

// take takes a free page for one sequence (one must be free).
func (p *Pool) take() int {
	pg := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.refs[pg] = 1
	return pg
}

// drop lets go of one sequence's hold on page pg: the last one gives it
// back to the pool.
func (p *Pool) drop(pg int) {
	p.refs[pg]--
	if p.refs[pg] == 0 {
		p.free = append(p.free, pg)
	}
}
