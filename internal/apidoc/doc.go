// Package apidoc holds the test that the public packages' documentation
// shows every method and field of the types users hold: no exported type
// of the root, kv or nn takes its methods or fields from a package users
// cannot read (an alias of an internal type, or an embedded one).
package apidoc
