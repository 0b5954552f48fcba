package accesslog

import (
	"fmt"
	"reflect"
	"testing"
	"unsafe"
)

// CopyTo copies every field, and no string of the copy views the original's memory: a field
// added to Record and forgotten in CopyTo fails here.
func TestCopyTo(t *testing.T) {
	var src Record
	v := reflect.ValueOf(&src).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(fmt.Sprintf("value-%d", i))
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Slice: // Headers
		default:
			t.Fatalf("field %s: kind %s: teach this test and CopyTo about it", v.Type().Field(i).Name, f.Kind())
		}
	}
	src.Headers = []Header{{Name: "x-tenant-id", Value: "acme"}, {Name: "authorization", Value: "Bearer a.b.c"}}
	dst := Record{Headers: make([]Header, 0, 4)}
	var arena []byte
	src.CopyTo(&dst, &arena)
	if !reflect.DeepEqual(src, dst) {
		t.Fatalf("copy differs:\n got %+v\nwant %+v", dst, src)
	}
	inArena := func(s string) bool {
		if s == "" || len(arena) == 0 {
			return s == ""
		}
		p, lo := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(&arena[0]))
		return p >= lo && p+uintptr(len(s)) <= lo+uintptr(len(arena))
	}
	dv := reflect.ValueOf(dst)
	for i := 0; i < dv.NumField(); i++ {
		name := dv.Type().Field(i).Name
		if s, ok := dv.Field(i).Interface().(string); ok && name != "File" && !inArena(s) {
			t.Errorf("field %s %q does not view the arena", name, s)
		}
	}
	for _, h := range dst.Headers {
		if !inArena(h.Name) || !inArena(h.Value) {
			t.Errorf("header %+v does not view the arena", h)
		}
	}
}
