package wireguard

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Implementations of a device (Config.Mode).
const (
	ModeAuto      = "auto"      // the kernel's where it has the module, else userspace
	ModeKernel    = "kernel"    // the kernel's or an error
	ModeUserspace = "userspace" // wireguard-go over TUN
)

// ErrUnavailable means no WireGuard device could be made in the mode
// asked for; the node must then hold traffic, never send it in clear.
var ErrUnavailable = errors.New("wireguard: encryption is unavailable")

// impl is one device's configuration channel: the kernel's netlink
// family or wireguard-go's in-process configuration protocol.
type impl interface {
	configure(wgtypes.Config) error
	read() (*wgtypes.Device, error)
	// close removes the device.
	close() error
	kind() string
}

// open makes the device name in the namespace at nsPath ("" : this
// one): the kernel's when mode allows and the module is there, else
// wireguard-go's. The device is left down.
func open(h *netlink.Handle, nsPath, name, mode string, mtu int) (impl, error) {
	if mode != ModeUserspace {
		k, err := openKernel(h, nsPath, name, mtu)
		if err == nil {
			return k, nil
		}
		if mode == ModeKernel || !errors.Is(err, unix.EOPNOTSUPP) {
			return nil, fmt.Errorf("%w: %s: kernel device: %w", ErrUnavailable, name, err)
		}
		log.WithField("device", name).Info("this kernel has no WireGuard module: using wireguard-go (userspace) instead")
	}
	u, err := openUserspace(nsPath, name, mtu)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: userspace device: %w", ErrUnavailable, name, err)
	}
	return u, nil
}

// inNetns runs fn on a thread in the namespace at path ("": as is).
// Sockets and devices fn makes stay in that namespace.
func inNetns(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("wireguard: current netns: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromPath(path)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("wireguard: netns %s: %w", path, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("wireguard: entering netns %s: %w", path, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// This thread stays in the wrong namespace: let it die with the
		// goroutine (no UnlockOSThread).
		return errors.Join(ferr, fmt.Errorf("wireguard: leaving netns %s: %w", path, err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// kernelDev is the kernel's WireGuard, configured over generic netlink.
type kernelDev struct {
	h    *netlink.Handle
	name string
	c    *wgctrl.Client
}

func openKernel(h *netlink.Handle, nsPath, name string, mtu int) (*kernelDev, error) {
	if _, err := h.LinkByName(name); err != nil {
		la := netlink.NewLinkAttrs()
		la.Name, la.MTU = name, mtu
		if err := h.LinkAdd(&netlink.Wireguard{LinkAttrs: la}); err != nil {
			return nil, err
		}
	}
	var c *wgctrl.Client
	err := inNetns(nsPath, func() (err error) { c, err = wgctrl.New(); return err })
	if err != nil {
		_ = deleteLink(h, name)
		return nil, err
	}
	return &kernelDev{h: h, name: name, c: c}, nil
}

func (k *kernelDev) configure(cfg wgtypes.Config) error { return k.c.ConfigureDevice(k.name, cfg) }
func (k *kernelDev) read() (*wgtypes.Device, error)     { return k.c.Device(k.name) }
func (k *kernelDev) kind() string                       { return "kernel" }
func (k *kernelDev) close() error {
	return errors.Join(k.c.Close(), deleteLink(k.h, k.name))
}

// userDev is wireguard-go in this process over a TUN device. Its UDP
// sockets and TUN are made in the target namespace; they stay there.
type userDev struct {
	name string
	d    *device.Device
}

func openUserspace(nsPath, name string, mtu int) (*userDev, error) {
	var d *device.Device
	err := inNetns(nsPath, func() error {
		t, err := tun.CreateTUN(name, mtu)
		if err != nil {
			return err
		}
		lg := &device.Logger{
			Verbosef: func(string, ...any) {},
			Errorf: func(f string, a ...any) {
				log.WithField("device", name).Warnf("wireguard-go: "+f, a...)
			},
		}
		d = device.NewDevice(t, nsBind{Bind: conn.NewDefaultBind(), path: nsPath}, lg)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &userDev{name: name, d: d}, nil
}

// configure sets cfg and brings wireguard-go up. wireguard-go also
// comes up by itself when the TUN reports its link up, but skips that
// when it cannot read the link's MTU (from a thread outside the
// device's namespace), so felix does not rely on it. Up again is a no-op.
func (u *userDev) configure(cfg wgtypes.Config) error {
	if err := u.d.IpcSet(uapiSet(cfg)); err != nil {
		return err
	}
	return u.d.Up()
}

// nsBind opens wireguard-go's UDP sockets in the device's namespace,
// whichever goroutine (and thread) brings the device up.
type nsBind struct {
	conn.Bind
	path string
}

func (b nsBind) Open(port uint16) (fns []conn.ReceiveFunc, actual uint16, err error) {
	err = inNetns(b.path, func() error {
		var oerr error
		fns, actual, oerr = b.Bind.Open(port)
		return oerr
	})
	return fns, actual, err
}

func (u *userDev) read() (*wgtypes.Device, error) {
	s, err := u.d.IpcGet()
	if err != nil {
		return nil, fmt.Errorf("wireguard: %s: %w", u.name, err)
	}
	return uapiGet(u.name, s)
}

func (u *userDev) kind() string { return "userspace" }

// close stops wireguard-go, which closes the TUN: the link goes with it.
func (u *userDev) close() error {
	u.d.Close()
	return nil
}

func deleteLink(h *netlink.Handle, name string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("wireguard: %s: %w", name, err)
	}
	if err := h.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("wireguard: deleting %s: %w", name, err)
	}
	return nil
}
