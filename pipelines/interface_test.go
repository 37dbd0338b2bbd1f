package pipelines

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/shaders"
)

// TestInterfaceIsTheTable: shaders/interface.glsl, which the shaders
// include for every binding, flag bit and specialization-constant ID, is
// what the Go table generates.
func TestInterfaceIsTheTable(t *testing.T) {
	if got := string(shaderFile(t, "interface.glsl")); got != ShaderInterface() {
		t.Errorf("shaders/interface.glsl is not pipelines.ShaderInterface(): run go generate ./pipelines\ngot:\n%s\nwant:\n%s", got, ShaderInterface())
	}
}

// TestShadersNameTheirInterface: the GLSL of the kernels this package
// builds takes every binding and specialization-constant ID from
// interface.glsl by name, so a number in a shader cannot drift from the
// table. (selftest.comp and heat_colour.comp are the vk layer's and the
// viewer's own.)
func TestShadersNameTheirInterface(t *testing.T) {
	literal := regexp.MustCompile(`(binding|constant_id|local_size_x_id)\s*=\s*[0-9]|INPUT\(\s*[0-9]`)
	files, err := filepath.Glob(filepath.Join("..", "shaders", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		base := filepath.Base(f)
		ext := filepath.Ext(base)
		if (ext != ".comp" && ext != ".glsl") || base == "selftest.comp" || base == "heat_colour.comp" || base == "interface.glsl" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			code, _, _ := strings.Cut(line, "//")
			if m := literal.FindString(code); m != "" && !strings.Contains(code, "local_size_x_id = 0") {
				t.Errorf("shaders/%s:%d: %q: a number where interface.glsl has a name", base, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// TestShadersDefineNoInterfaceConstant: no shader defines by hand a
// number named like the interface's (a flag bit, an element type, a
// binding, a specialization-constant ID): it would be a second
// definition of a value the Go side sets, free to drift from it.
func TestShadersDefineNoInterfaceConstant(t *testing.T) {
	prefixes := map[string]bool{}
	for _, s := range shaderInterface {
		for _, n := range s.names {
			prefix, _, _ := strings.Cut(n.name, "_")
			prefixes[prefix] = true
		}
	}
	def := regexp.MustCompile(`^\s*(?:const\s+int\s+(\w+)\s*=\s*|#define\s+(\w+)\s+)[-(]*\s*[0-9]`)
	files, err := filepath.Glob(filepath.Join("..", "shaders", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		base := filepath.Base(f)
		if ext := filepath.Ext(base); (ext != ".comp" && ext != ".glsl") || base == "interface.glsl" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			m := def.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			name := m[1] + m[2]
			if prefix, _, ok := strings.Cut(name, "_"); ok && prefixes[prefix] {
				t.Errorf("shaders/%s:%d: %q: the interface table names the %s_* constants", base, i+1, strings.TrimSpace(line), prefix)
			}
		}
	}
}

// TestElementTypeCodes: the TYPE_* constants the kernels compare their
// element-type specialization constants with are what typeSpec sets.
func TestElementTypeCodes(t *testing.T) {
	value := map[string]int{}
	for _, s := range shaderInterface {
		for _, n := range s.names {
			value[n.name] = n.value
		}
	}
	for name, dt := range map[string]core.DType{"TYPE_F32": core.Float32, "TYPE_F16": core.Float16, "TYPE_BF16": core.BFloat16, "TYPE_Q8_0": core.Q8_0, "TYPE_Q4_0": core.Q4_0} {
		if v, ok := value[name]; !ok || int32(v) != typeSpec(dt) {
			t.Errorf("%s = %d (in the table: %v), typeSpec(%v) = %d", name, v, ok, dt, typeSpec(dt))
		}
	}
}

// TestShaderInterface reads each embedded SPIR-V variant's decorations
// back against the table: every descriptor is in set 0 at a binding the
// Go side binds, of the kind it binds there (uniform block, storage
// buffer, texel buffer), read-only where the Go side only reads it and
// written only where the Go side expects output (TestSpecConstantsByName
// checks the specialization constants). A shader edited without the table
// fails here.
func TestShaderInterface(t *testing.T) {
	for _, v := range Variants {
		want := familyBindings(v)
		if want == nil {
			continue // the vk layer's selftest, the viewer's heat map
		}
		t.Run(v.Name(), func(t *testing.T) {
			m := variantModule(t, v)
			for _, d := range m.descriptors() {
				switch {
				case d.set != 0:
					t.Errorf("binding %d in descriptor set %d, want set 0", d.binding, d.set)
				case d.binding >= len(want):
					t.Errorf("binding %d (%s): the Go side binds %d bindings", d.binding, d.kind, len(want))
				case d.kind != kindOf(want[d.binding].kind):
					t.Errorf("binding %d is a %s in the shader, a %s (%v) in the table", d.binding, d.kind, kindOf(want[d.binding].kind), want[d.binding].kind)
				case d.kind == "storage buffer" && d.use != want[d.binding].use && d.use != readWrite:
					t.Errorf("binding %d is %s in the shader, %s in the table", d.binding, accessName(d.use), accessName(want[d.binding].use))
				case d.kind == "storage buffer" && d.use == readWrite && want[d.binding].use != readWrite:
					t.Errorf("binding %d is read and written in the shader; the table has it %s", d.binding, accessName(want[d.binding].use))
				}
			}
		})
	}
}

// variantModule parses the embedded SPIR-V of variant v.
func variantModule(t *testing.T, v Variant) *spirvModule {
	t.Helper()
	code, err := shaders.SPIRV(v.Name())
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseSPIRV(code)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// kindOf is the SPIR-V descriptor kind a vk binding type declares.
func kindOf(b core.BindingType) string {
	switch b {
	case core.UniformBuffer:
		return "uniform block"
	case core.StorageBuffer:
		return "storage buffer"
	case core.StorageImage:
		return "storage image"
	}
	return "uniform texel buffer"
}

func accessName(a access) string {
	return [...]string{"read-only", "write-only", "read-write"}[a]
}

// spirvModule is what the test reads of a SPIR-V module: decorations,
// variables and the types they point to.
type spirvModule struct {
	decor      map[uint32]map[uint32][]uint32 // id -> decoration -> operands
	allMembers map[uint32]map[uint32]int      // struct id -> decoration -> members carrying it
	offsets    map[uint32]map[uint32]int      // struct id -> member -> Offset decoration
	members    map[uint32]int                 // struct id -> member count
	pointers   map[uint32][2]uint32           // pointer type id -> storage class, pointee
	images     map[uint32][2]uint32           // image type id -> dim, sampled
	sampled    map[uint32]uint32              // sampled image type id -> image type
	variables  map[uint32]uint32              // variable id -> pointer type
}

// SPIR-V opcodes, decorations and storage classes the test reads.
const (
	opTypeImage        = 25
	opTypeSampledImage = 27
	opTypeStruct       = 30
	opTypePointer      = 32
	opVariable         = 59
	opDecorate         = 71
	opMemberDecorate   = 72

	decSpecID        = 1
	decBlock         = 2
	decBufferBlock   = 3
	decNonWritable   = 24
	decNonReadable   = 25
	decBinding       = 33
	decDescriptorSet = 34
	decOffset        = 35

	scUniformConstant = 0
	scUniform         = 2
	scPushConstant    = 9
	scStorageBuffer   = 12

	dimBuffer = 5
)

func parseSPIRV(code []byte) (*spirvModule, error) {
	if len(code)%4 != 0 || len(code) < 20 {
		return nil, fmt.Errorf("SPIR-V of %d bytes", len(code))
	}
	words := make([]uint32, len(code)/4)
	for i := range words {
		words[i] = binary.LittleEndian.Uint32(code[4*i:])
	}
	if words[0] != 0x07230203 {
		return nil, fmt.Errorf("not SPIR-V: magic %#x", words[0])
	}
	m := &spirvModule{decor: map[uint32]map[uint32][]uint32{}, allMembers: map[uint32]map[uint32]int{}, offsets: map[uint32]map[uint32]int{}, members: map[uint32]int{}, pointers: map[uint32][2]uint32{},
		images: map[uint32][2]uint32{}, sampled: map[uint32]uint32{}, variables: map[uint32]uint32{}}
	for i := 5; i < len(words); {
		n, op := int(words[i]>>16), words[i]&0xffff
		if n == 0 || i+n > len(words) {
			return nil, fmt.Errorf("instruction at word %d: %d words", i, n)
		}
		ops := words[i+1 : i+n]
		switch op {
		case opDecorate:
			if m.decor[ops[0]] == nil {
				m.decor[ops[0]] = map[uint32][]uint32{}
			}
			m.decor[ops[0]][ops[1]] = ops[2:]
		case opMemberDecorate:
			if m.allMembers[ops[0]] == nil {
				m.allMembers[ops[0]] = map[uint32]int{}
			}
			m.allMembers[ops[0]][ops[2]]++
			if ops[2] == decOffset {
				if m.offsets[ops[0]] == nil {
					m.offsets[ops[0]] = map[uint32]int{}
				}
				m.offsets[ops[0]][ops[1]] = int(ops[3])
			}
		case opTypeStruct:
			m.members[ops[0]] = len(ops) - 1
		case opTypePointer:
			m.pointers[ops[0]] = [2]uint32{ops[1], ops[2]}
		case opTypeImage:
			m.images[ops[0]] = [2]uint32{ops[2], ops[6]}
		case opTypeSampledImage:
			m.sampled[ops[0]] = ops[1]
		case opVariable:
			m.variables[ops[1]] = ops[0]
		}
		i += n
	}
	return m, nil
}

// descriptor is one decorated descriptor variable of a module.
type descriptor struct {
	set, binding int
	kind         string
	use          access // storage buffers
}

// descriptors lists the module's descriptor variables by binding.
func (m *spirvModule) descriptors() []descriptor {
	var out []descriptor
	for v, ptr := range m.variables {
		b, ok := m.decor[v][decBinding]
		if !ok {
			continue
		}
		d := descriptor{binding: int(b[0]), use: readWrite}
		if s, ok := m.decor[v][decDescriptorSet]; ok {
			d.set = int(s[0])
		}
		class, pointee := m.pointers[ptr][0], m.pointers[ptr][1]
		_, block := m.decor[pointee][decBlock]
		_, bufferBlock := m.decor[pointee][decBufferBlock]
		switch {
		case class == scUniform && block:
			d.kind = "uniform block"
		case class == scStorageBuffer || class == scUniform && bufferBlock:
			d.kind = "storage buffer"
			d.use = m.storageAccess(v, pointee)
		case class == scUniformConstant:
			img, isSampled := m.sampled[pointee]
			if !isSampled {
				img = pointee
			}
			dim, sampled := m.images[img][0], m.images[img][1]
			switch {
			case dim == dimBuffer && sampled == 1:
				d.kind = "uniform texel buffer"
			case dim != dimBuffer && sampled == 2:
				d.kind = "storage image"
			default:
				d.kind = fmt.Sprintf("image (dim %d, sampled %d)", dim, sampled)
			}
		default:
			d.kind = fmt.Sprintf("storage class %d", class)
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].binding < out[j].binding })
	return out
}

// storageAccess is read-only when the variable or every member of its
// block is NonWritable, write-only when NonReadable.
func (m *spirvModule) storageAccess(v, block uint32) access {
	every := func(dec uint32) bool {
		_, onVar := m.decor[v][dec]
		return onVar || m.members[block] > 0 && m.allMembers[block][dec] == m.members[block]
	}
	switch {
	case every(decNonWritable):
		return readOnly
	case every(decNonReadable):
		return writeOnly
	}
	return readWrite
}

// specIDs lists the module's specialization-constant IDs.
func (m *spirvModule) specIDs() []int {
	var ids []int
	for _, d := range m.decor {
		if s, ok := d[decSpecID]; ok {
			ids = append(ids, int(s[0]))
		}
	}
	sort.Ints(ids)
	return ids
}

// parameterBlocks are the member offsets, member by member, of each
// Block-decorated struct that a Uniform or PushConstant variable points
// to: the module's parameter and push-constant blocks.
func (m *spirvModule) parameterBlocks() [][]int {
	var out [][]int
	for _, ptr := range m.variables {
		class, pointee := m.pointers[ptr][0], m.pointers[ptr][1]
		if _, block := m.decor[pointee][decBlock]; !block || class != scUniform && class != scPushConstant {
			continue
		}
		offsets := make([]int, m.members[pointee])
		for i := range offsets {
			at, ok := m.offsets[pointee][uint32(i)]
			if !ok {
				at = -1
			}
			offsets[i] = at
		}
		out = append(out, offsets)
	}
	return out
}
