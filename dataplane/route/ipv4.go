package route

import "slices"

// The IPv4 table is DIR-16-8-8. An entry, in the top array or in a chunk, is either a leaf or a
// link. A leaf is an index into hops (noRoute, index 0, means no prefix covers the entry). A link
// has childFlag set and, below it, the number of a 256-entry chunk in chunks, indexed by the
// next address byte. Leaf indexes stay below childFlag because there are fewer than 2^31 routes.
const (
	childFlag = 1 << 31
	noRoute   = 0
	chunkLen  = 256
)

// ipv4Table is the IPv4 half of a Table. top is nil when there are no IPv4 routes.
type ipv4Table struct {
	top    *[1 << 16]uint32 // entries for the top 16 address bits
	chunks []uint32         // 256-entry chunks for the third and fourth bytes, back to back
	hops   []uint32         // leaf index -> next-hop ID; hops[noRoute] is unused
}

// route4 is an IPv4 route with its address as a big-endian integer.
type route4 struct {
	addr uint32
	bits int
	hop  uint32
}

// buildIPv4 expands routes, sorted by prefix length then address, into a DIR-16-8-8 table.
// Routes are inserted from the shortest prefix to the longest, so a longer prefix simply
// overwrites the entries of the shorter ones it lies in, and a range being filled never holds
// links (links are only made by longer prefixes, which come later).
func buildIPv4(routes []route4) ipv4Table {
	if len(routes) == 0 {
		return ipv4Table{}
	}
	t := ipv4Table{
		top:    new([1 << 16]uint32),
		chunks: make([]uint32, 0, chunksNeeded(routes)*chunkLen),
		hops:   make([]uint32, 1, len(routes)+1),
	}
	for _, r := range routes {
		t.hops = append(t.hops, r.hop)
		t.insert(r, uint32(len(t.hops)-1))
	}
	return t
}

// chunksNeeded returns how many chunks routes expand into: one per distinct /16 holding a
// prefix longer than 16 bits, and one per distinct /24 holding a prefix longer than 24 bits.
// Sizing the chunk slice up front saves Build from growing and copying it.
func chunksNeeded(routes []route4) int {
	var keys []uint32 // /16 keys are below 1<<16; /24 keys are tagged with 1<<24 to stay apart
	for _, r := range routes {
		if r.bits > 16 {
			keys = append(keys, r.addr>>16)
		}
		if r.bits > 24 {
			keys = append(keys, 1<<24|r.addr>>8)
		}
	}
	slices.Sort(keys)
	return len(slices.Compact(keys))
}

// insert writes leaf into every entry that r covers at the level where r's length ends.
func (t *ipv4Table) insert(r route4, leaf uint32) {
	top := r.addr >> 16
	third, fourth := int(r.addr>>8&0xff), int(r.addr&0xff)
	if r.bits <= 16 {
		fill(t.top[top:top+1<<(16-r.bits)], leaf)
		return
	}
	chunk, link := t.descend(t.top[top])
	t.top[top] = link
	if r.bits <= 24 {
		i := chunk*chunkLen + third
		fill(t.chunks[i:i+1<<(24-r.bits)], leaf)
		return
	}
	i := chunk*chunkLen + third
	chunk, link = t.descend(t.chunks[i])
	t.chunks[i] = link
	i = chunk*chunkLen + fourth
	fill(t.chunks[i:i+1<<(32-r.bits)], leaf)
}

// descend returns the chunk below entry e and the link to it. If e is a leaf, it appends a new
// chunk whose entries all inherit that leaf (the shorter prefix still covers them).
func (t *ipv4Table) descend(e uint32) (chunk int, link uint32) {
	if e&childFlag != 0 {
		return int(e &^ childFlag), e
	}
	start := len(t.chunks)
	t.chunks = slices.Grow(t.chunks, chunkLen)[:start+chunkLen]
	fill(t.chunks[start:], e)
	chunk = start / chunkLen
	return chunk, uint32(chunk) | childFlag
}

func fill(entries []uint32, leaf uint32) {
	for i := range entries {
		entries[i] = leaf
	}
}
