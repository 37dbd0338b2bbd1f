package core

// LoadPath is how the attention kernel reads Q, K, V and masks; the
// planner picks it per device unless a device's Config forces one.
type LoadPath int

const (
	// AutoLoadPath lets the planner choose per device.
	AutoLoadPath LoadPath = iota
	// TexelLoadPath reads through uniform texel buffers (fast on lavapipe).
	TexelLoadPath
	// StorageLoadPath reads plain storage buffers (the portable path).
	StorageLoadPath
)

// Valid reports whether p is one of the paths above.
func (p LoadPath) Valid() bool { return p >= 0 && int(p) < len(loadPathNames.list) }

// MarshalText writes the path's name, so tunings save as readable JSON.
func (p LoadPath) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads a name String prints (ParseLoadPath).
func (p *LoadPath) UnmarshalText(b []byte) error {
	c, err := ParseLoadPath(string(b))
	if err != nil {
		return err
	}
	*p = c
	return nil
}

// PlanAsVendors are the names a device may plan as (Config.PlanAs), each
// a driver of the planner's quirk table.
var PlanAsVendors = []string{"nvidia", "amd", "intel", "lavapipe"}
