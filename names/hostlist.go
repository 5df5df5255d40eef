package names

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxHostlistHosts caps how many names one hostlist may expand to. Slurm
// itself refuses a single range of more than 65,536 hosts; we allow larger
// ranges (a bitmap of a big machine can print as one) but bound the whole
// expansion, so that a hostile or corrupt "n[0-999999999999]" costs an error,
// not the node's memory.
const MaxHostlistHosts = 1_000_000

// maxHostlistBytes bounds the text an expansion may produce (an upper bound is
// checked before anything is allocated): a million 253-byte names would be a
// quarter of a gigabyte.
const maxHostlistBytes = 64 << 20

// maxNumberDigits is the longest digit string a range bound may have. Eighteen
// digits always fit in a uint64, so no bound can overflow; Slurm's strtoul
// would silently saturate instead.
const maxNumberDigits = 18

// HostlistError reports a hostlist expression that cannot be expanded, and
// where: Offset is the 0-based byte offset into Expr at which the problem was
// found.
type HostlistError struct {
	Expr   string
	Offset int
	Reason string
}

// Error returns `hostlist "EXPR": REASON at offset N`.
func (e *HostlistError) Error() string {
	return fmt.Sprintf("hostlist %q: %s at offset %d", e.Expr, e.Reason, e.Offset)
}

// numRange is one "lo-hi" (or "lo") inside brackets. width is the length of
// the lower bound as written: Slurm pads every number of the range to it, so
// "n[008-010]" gives n008 n009 n010 and "n[8-010]" gives n8 n9 n10.
type numRange struct {
	lo, hi uint64
	width  int
}

// group is one bracket group: its ranges in the order written.
type group struct {
	ranges []numRange
	count  uint64 // hosts it stands for
	maxLen int    // longest number it prints
}

// element is one comma-separated host expression: lits[0] g[0] lits[1] … g[k-1]
// lits[k], where lits[k] is always empty (Slurm allows no text after the last
// group).
type element struct {
	lits   []string
	groups []group
	count  uint64
	maxLen int
}

// ExpandHostlist expands a Slurm hostlist expression ("n[001-004,7],gpu1")
// into host names, in the order Slurm prints them (`scontrol show hostnames`),
// duplicates kept as Slurm keeps them. The empty expression is the empty list.
//
// The grammar is Slurm's (src/common/hostlist.c), checked against scontrol
// 22.05: a comma-separated list of elements; commas inside brackets separate
// ranges, not hosts. An element is a name made of letters, digits, '-', '_' and
// '.', with any number of bracket groups; a group is a comma-separated list of
// "N" or "LO-HI" with decimal bounds, each range padded with zeros to the width
// of its lower bound as written. Several groups form a cartesian product in
// Slurm's own order, which is how its recursive expansion happens to walk
// them: the last group varies fastest, then the first, the second, and so on
// up to the second-to-last, which varies slowest. With two groups that is
// plain left-outermost order ("a[1-2]b[1-2]" is a1b1 a1b2 a2b1 a2b2); with
// three, "a[1-2]b[1-2]c[1-2]" starts a1b1c1 a1b1c2 a2b1c1 a2b1c2 a1b2c1.
//
// ExpandHostlist is stricter than Slurm, which shrugs at some mistakes: it
// rejects empty elements ("a,,b"), blanks as separators, an open upper bound
// ("n[1-]", which Slurm reads as n1), unbalanced brackets (which Slurm turns
// into host names containing '[' or ']'), steps ("n[1-9:2]"; Slurm has none),
// descending ranges, text after the last group ("n[1-2].ib", which Slurm
// rejects too), names that are not valid node names (see ValidateNode),
// and expansions of more than MaxHostlistHosts hosts. Errors are
// *HostlistError.
func ExpandHostlist(expr string) ([]string, error) {
	if expr == "" {
		return nil, nil
	}
	elems, total, err := parseHostlist(expr)
	if err != nil {
		return nil, err
	}
	var upper uint64
	for i := range elems {
		upper += elems[i].count * uint64(elems[i].maxLen)
	}
	if upper > maxHostlistBytes {
		return nil, &HostlistError{Expr: expr, Offset: 0, Reason: fmt.Sprintf("expands to more than %d bytes of names", maxHostlistBytes)}
	}
	buf := make([]byte, 0, upper)
	ends := make([]int, 0, total)
	for i := range elems {
		buf, ends = expandElement(buf, ends, &elems[i])
	}
	// One backing string for every name: expanding a[0001-4608] costs a
	// handful of allocations, not 4608. The buffer is a local slice, not a
	// strings.Builder, because appending through a pointer pays a GC write
	// barrier per name.
	all := string(buf)
	names := make([]string, len(ends))
	start := 0
	for i, end := range ends {
		names[i] = all[start:end]
		start = end
	}
	return names, nil
}

// parseHostlist checks the whole expression and sizes it before any name is
// built, so that a bad or huge expression allocates nothing.
func parseHostlist(expr string) ([]element, int, error) {
	var elems []element
	var total uint64
	pos := 0
	for {
		e, next, err := parseElement(expr, pos)
		if err != nil {
			return nil, 0, err
		}
		total += e.count
		if total > MaxHostlistHosts {
			return nil, 0, &HostlistError{Expr: expr, Offset: pos, Reason: fmt.Sprintf("expands to more than %d hosts", MaxHostlistHosts)}
		}
		elems = append(elems, e)
		if next == len(expr) {
			return elems, int(total), nil
		}
		pos = next + 1 // skip the comma
	}
}

// parseElement parses the element starting at pos and returns it with the
// offset of the comma (or end of string) that ends it.
func parseElement(expr string, pos int) (element, int, error) {
	fail := func(off int, format string, args ...any) (element, int, error) {
		return element{}, 0, &HostlistError{Expr: expr, Offset: off, Reason: fmt.Sprintf(format, args...)}
	}
	start := pos
	e := element{count: 1}
	litStart := pos
	for pos < len(expr) && expr[pos] != ',' {
		c := expr[pos]
		switch {
		case nameByte(c):
			pos++
		case c == '[':
			e.lits = append(e.lits, expr[litStart:pos])
			g, next, err := parseGroup(expr, pos)
			if err != nil {
				return element{}, 0, err
			}
			e.groups = append(e.groups, g)
			// Both factors are at most MaxHostlistHosts here, so the
			// product fits a uint64.
			e.count *= g.count
			if e.count > MaxHostlistHosts {
				return fail(start, "expands to more than %d hosts", MaxHostlistHosts)
			}
			e.maxLen += g.maxLen
			pos = next
			litStart = pos
		case c == ']':
			return fail(pos, "unmatched ']'")
		default:
			r, _ := utf8.DecodeRuneInString(expr[pos:])
			return fail(pos, "invalid character %q", r)
		}
	}
	if pos == start {
		return fail(pos, "empty element")
	}
	tail := expr[litStart:pos]
	if len(e.groups) > 0 && tail != "" {
		// Slurm takes the last '[' of an element as its range and requires
		// the ']' to end the element; "n[1-2].ib" is "Invalid hostlist".
		return fail(litStart, "text %q after the last bracket group", tail)
	}
	e.lits = append(e.lits, tail)
	if expr[start] == '-' {
		return fail(start, "name starts with '-'")
	}
	for _, l := range e.lits {
		e.maxLen += len(l)
	}
	if e.maxLen > maxNameLen {
		return fail(start, "names longer than %d characters", maxNameLen)
	}
	return e, pos, nil
}

// parseGroup parses the bracket group whose '[' is at pos and returns it with
// the offset just past its ']'.
func parseGroup(expr string, pos int) (group, int, error) {
	fail := func(off int, format string, args ...any) (group, int, error) {
		return group{}, 0, &HostlistError{Expr: expr, Offset: off, Reason: fmt.Sprintf(format, args...)}
	}
	open := pos
	pos++
	var g group
	for {
		r, next, err := parseRange(expr, pos, open)
		if err != nil {
			return group{}, 0, err
		}
		g.ranges = append(g.ranges, r)
		g.count += r.hi - r.lo + 1
		if g.count > MaxHostlistHosts {
			return fail(pos, "expands to more than %d hosts", MaxHostlistHosts)
		}
		g.maxLen = max(g.maxLen, r.width, digitCount(r.hi))
		pos = next
		if expr[pos] == ']' {
			return g, pos + 1, nil
		}
		pos++ // the comma between ranges
	}
}

// parseRange parses "N" or "LO-HI" at pos, inside the group opened at open,
// and returns it with the offset of the ',' or ']' that ends it.
func parseRange(expr string, pos, open int) (numRange, int, error) {
	fail := func(off int, format string, args ...any) (numRange, int, error) {
		return numRange{}, 0, &HostlistError{Expr: expr, Offset: off, Reason: fmt.Sprintf(format, args...)}
	}
	start := pos
	end := pos
	for end < len(expr) && expr[end] != ',' && expr[end] != ']' {
		switch c := expr[end]; {
		case c >= '0' && c <= '9', c == '-':
		case c == ':':
			return fail(end, "range step in %q (Slurm ranges have no step)", expr[start:scanGroupEnd(expr, end)])
		case c == '[':
			return fail(end, "'[' inside brackets")
		default:
			r, _ := utf8.DecodeRuneInString(expr[end:])
			return fail(end, "invalid character %q inside brackets", r)
		}
		end++
	}
	if end == len(expr) {
		return fail(open, "unclosed '['")
	}
	text := expr[start:end]
	if text == "" {
		return fail(start, "empty range")
	}
	loText, hiText, isRange := strings.Cut(text, "-")
	if !isRange {
		hiText = loText
	}
	switch {
	case loText == "":
		return fail(start, "range %q has no lower bound", text)
	case hiText == "":
		return fail(start, "range %q has no upper bound", text)
	case strings.Contains(hiText, "-"):
		return fail(start, "malformed range %q", text)
	case len(loText) > maxNumberDigits || len(hiText) > maxNumberDigits:
		return fail(start, "number in %q longer than %d digits", text, maxNumberDigits)
	}
	// Only digits are left, at most 18 of them: these cannot fail.
	lo, _ := strconv.ParseUint(loText, 10, 64)
	hi, _ := strconv.ParseUint(hiText, 10, 64)
	if lo > hi {
		return fail(start, "descending range %q", text)
	}
	return numRange{lo: lo, hi: hi, width: len(loText)}, end, nil
}

// scanGroupEnd returns the offset of the next ']' or ',' at or after pos (or
// the end), for quoting a whole range in an error.
func scanGroupEnd(expr string, pos int) int {
	for pos < len(expr) && expr[pos] != ']' && expr[pos] != ',' {
		pos++
	}
	return pos
}

// expandElement appends the names of e to buf, recording where each ends.
//
// The walk follows Slurm's: the groups before the last one are an odometer
// whose fastest wheel is the first group and whose slowest is the
// second-to-last; for each reading, the last group is expanded in full.
func expandElement(buf []byte, ends []int, e *element) ([]byte, []int) {
	k := len(e.groups)
	if k == 0 {
		buf = append(buf, e.lits[0]...)
		return buf, append(ends, len(buf))
	}
	// wheel[i] is the position in group i (for i < k-1): which range, and
	// the value within it.
	type wheel struct {
		r int
		v uint64
	}
	wheels := make([]wheel, k-1)
	for i := range wheels {
		wheels[i] = wheel{0, e.groups[i].ranges[0].lo}
	}
	var prefix []byte
	last := &e.groups[k-1]
	for {
		prefix = prefix[:0]
		for i, w := range wheels {
			prefix = append(prefix, e.lits[i]...)
			prefix = appendPadded(prefix, w.v, e.groups[i].ranges[w.r].width)
		}
		prefix = append(prefix, e.lits[k-1]...)
		for _, r := range last.ranges {
			buf, ends = appendRange(buf, ends, prefix, r)
		}
		// Advance the odometer: group 0 fastest, group k-2 slowest.
		i := 0
		for ; i < len(wheels); i++ {
			w := &wheels[i]
			rs := e.groups[i].ranges
			if w.v < rs[w.r].hi {
				w.v++
				break
			}
			if w.r+1 < len(rs) {
				w.r++
				w.v = rs[w.r].lo
				break
			}
			*w = wheel{0, rs[0].lo}
		}
		if i == len(wheels) {
			return buf, ends
		}
	}
}

// appendRange appends prefix+N for every N of r. The number is kept as
// ASCII and incremented in place, carrying into the padding zeros, instead of
// being formatted anew for every host: this loop is the whole cost of
// expanding a big machine's node list.
func appendRange(buf []byte, ends []int, prefix []byte, r numRange) ([]byte, []int) {
	var digits [maxNumberDigits]byte // hi < 10^18: never more digits
	num := appendPadded(digits[:0], r.lo, r.width)
	for v := r.lo; ; v++ {
		buf = append(buf, prefix...)
		buf = append(buf, num...)
		ends = append(ends, len(buf))
		if v == r.hi {
			return buf, ends
		}
		num = incrementDecimal(num)
	}
}

// incrementDecimal adds one to the decimal number in num, in place; only a
// number of all nines grows by a digit ("99" to "100", while "099" becomes
// "100" too, its padding absorbing the carry).
func incrementDecimal(num []byte) []byte {
	for i := len(num) - 1; i >= 0; i-- {
		if num[i] < '9' {
			num[i]++
			return num
		}
		num[i] = '0'
	}
	num = append(num, '0')
	num[0] = '1'
	return num
}

// appendPadded appends v in decimal, left-padded with zeros to width.
func appendPadded(dst []byte, v uint64, width int) []byte {
	for n := digitCount(v); n < width; n++ {
		dst = append(dst, '0')
	}
	return strconv.AppendUint(dst, v, 10)
}

// digitCount is the number of decimal digits of v.
func digitCount(v uint64) int {
	n := 1
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

// hostKey splits a host name the way Slurm's hostlist does for compression:
// the prefix, and the run of digits that ends the name (if any, and if it is
// short enough to be a range bound).
type hostKey struct {
	name   string
	prefix string
	digits string // "" when the name has no usable numeric suffix
	num    uint64
}

func splitHost(name string) hostKey {
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	k := hostKey{name: name, prefix: name}
	if d := name[i:]; d != "" && len(d) <= maxNumberDigits {
		k.prefix, k.digits = name[:i], d
		k.num, _ = strconv.ParseUint(d, 10, 64)
	}
	return k
}

// compareHostKeys orders host names as SortHostnames documents.
func compareHostKeys(a, b hostKey) int {
	if c := strings.Compare(a.prefix, b.prefix); c != 0 {
		return c
	}
	if c := cmp.Compare(min(len(a.digits), 1), min(len(b.digits), 1)); c != 0 {
		return c // names without a number first
	}
	if c := cmp.Compare(a.num, b.num); c != 0 {
		return c
	}
	return cmp.Compare(len(a.digits), len(b.digits))
}

func sortedKeys(names []string) []hostKey {
	keys := make([]hostKey, 0, len(names))
	for _, n := range names {
		keys = append(keys, splitHost(n))
	}
	slices.SortFunc(keys, compareHostKeys)
	// Equal keys mean equal names (the digits, value and width fix the
	// string), so duplicates are neighbours now.
	return slices.CompactFunc(keys, func(a, b hostKey) bool { return a.name == b.name })
}

// SortHostnames returns the distinct names in natural order: by the part
// before the trailing number (byte order), names without a number first, then
// by the number's value, and for equal values the narrower spelling first
// ("n9" < "n09" < "n10"). This is the order CompressHostlist writes, so
// ExpandHostlist(CompressHostlist(x)) equals SortHostnames(x).
func SortHostnames(names []string) []string {
	keys := sortedKeys(names)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.name
	}
	return out
}

// CompressHostlist writes names as a Slurm hostlist expression, as
// `scontrol show hostlistsorted` does: sorted and deduplicated (see
// SortHostnames), names sharing a prefix gathered into one bracket group over
// their trailing number, consecutive numbers of one width joined into a range
// ("n[01-03,07],login1"). Only the trailing digits are bracketed, because
// Slurm rejects text after a group ("n[1-2].ib"). The names must be valid node
// names (ValidateNode); others are written as they are and will not
// round-trip. The empty list gives "".
func CompressHostlist(names []string) string {
	keys := sortedKeys(names)
	var b strings.Builder
	for i := 0; i < len(keys); {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		k := keys[i]
		j := i + 1
		if k.digits != "" {
			for j < len(keys) && keys[j].digits != "" && keys[j].prefix == k.prefix {
				j++
			}
		}
		if j-i == 1 {
			b.WriteString(k.name)
			i = j
			continue
		}
		b.WriteString(k.prefix)
		b.WriteByte('[')
		writeRanges(&b, keys[i:j])
		b.WriteByte(']')
		i = j
	}
	return b.String()
}

// writeRanges writes the numbers of keys (one prefix, sorted) as Slurm
// ranges. A range keeps the width of its first number; the next name extends
// it only if it is the next number and prints the same at that width, so "n9"
// and "n10" join (n[9-10]) but "n09" and "n10" only when the range started at
// a two-digit spelling.
func writeRanges(b *strings.Builder, keys []hostKey) {
	var num []byte
	for i := 0; i < len(keys); {
		lo := keys[i]
		width := len(lo.digits)
		j := i + 1
		for j < len(keys) && keys[j].num == keys[j-1].num+1 &&
			len(keys[j].digits) == max(width, digitCount(keys[j].num)) {
			j++
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(lo.digits)
		if j-i > 1 {
			b.WriteByte('-')
			num = appendPadded(num[:0], keys[j-1].num, width)
			b.Write(num)
		}
		i = j
	}
}
