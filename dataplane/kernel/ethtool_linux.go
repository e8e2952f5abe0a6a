package kernel

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtool commands and structures of <linux/ethtool.h> used here.
const (
	ethtoolGTXCSUM = 0x16 // get TX checksum offload
	ethtoolSTXCSUM = 0x17 // set TX checksum offload
	ethtoolGGRO    = 0x2b // get generic receive offload
	ethtoolSGRO    = 0x2c // set generic receive offload
)

type ethtoolValue struct {
	cmd  uint32
	data uint32
}

type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data uintptr
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// SetTxChecksum turns TX checksum offload of link name on or off.
//
// The overlay device needs it off: with offload on, the kernel hands an encapsulated packet
// on with its inner TCP/UDP checksum only partly computed, trusting hardware to finish it. A
// physical NIC does; a veth does not, so a gateway pod on the same node would receive inner
// packets with bad checksums. (Liqo and flannel switch it off on their VXLAN devices too.)
func SetTxChecksum(name string, on bool) error {
	v := ethtoolValue{cmd: ethtoolSTXCSUM}
	if on {
		v.data = 1
	}
	return ethtool(name, &v)
}

// TxChecksum reports whether TX checksum offload is on for link name.
func TxChecksum(name string) (bool, error) {
	v := ethtoolValue{cmd: ethtoolGTXCSUM}
	err := ethtool(name, &v)
	return v.data != 0, err
}

// SetGRO turns generic receive offload of link name on or off. On a veth, turning it on also
// switches the veth to NAPI mode, so the kernel coalesces what it receives (VXLAN and UDP
// included) as a physical NIC's driver would.
func SetGRO(name string, on bool) error {
	v := ethtoolValue{cmd: ethtoolSGRO}
	if on {
		v.data = 1
	}
	return ethtool(name, &v)
}

// GRO reports whether generic receive offload is on for link name.
func GRO(name string) (bool, error) {
	v := ethtoolValue{cmd: ethtoolGGRO}
	err := ethtool(name, &v)
	return v.data != 0, err
}

func ethtool(name string, v *ethtoolValue) error {
	if len(name) >= unix.IFNAMSIZ {
		return fmt.Errorf("link name %q is longer than %d bytes", name, unix.IFNAMSIZ-1)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("ethtool on %s: %w", name, err)
	}
	defer unix.Close(fd)
	var req ifreqData
	copy(req.name[:], name)
	req.data = uintptr(unsafe.Pointer(v))
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req))); e != 0 {
		return fmt.Errorf("ethtool command %#x on %s: %w", v.cmd, name, e)
	}
	return nil
}
