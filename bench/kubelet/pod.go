package kubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// podWorker runs one pod: its sandbox, its containers, its status, its end.
type podWorker struct {
	k *Kubelet

	mu       sync.Mutex
	pod      *corev1.Pod
	ip       netip.Addr
	netns    string // empty for host-network pods
	dir      string
	setupOK  bool
	setupErr string
	ctrs     []*container

	changed  chan struct{} // the pod object changed
	dirty    chan struct{} // the status should be written
	goneCh   chan struct{}
	goneOnce sync.Once
}

// container is one container's supervisor state.
type container struct {
	spec corev1.Container

	mu        sync.Mutex
	proc      *os.Process
	running   bool
	startedAt time.Time
	ready     bool
	restarts  int32
	waiting   *corev1.ContainerStateWaiting
	last      *corev1.ContainerStateTerminated
	done      bool // exited and will not be restarted
	stopping  bool
	exited    chan struct{} // closed when the supervisor returns
	imageID   string        // what ran: repository@digest for a pulled image
}

func newPodWorker(k *Kubelet, p *corev1.Pod) *podWorker {
	w := &podWorker{k: k, pod: p, changed: make(chan struct{}, 1), dirty: make(chan struct{}, 1), goneCh: make(chan struct{}),
		dir: filepath.Join(k.o.StateDir, "pods", string(p.UID))}
	for _, c := range p.Spec.Containers {
		w.ctrs = append(w.ctrs, &container{spec: c, exited: make(chan struct{}),
			waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}})
	}
	return w
}

func (w *podWorker) update(p *corev1.Pod) {
	w.mu.Lock()
	w.pod = p
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *podWorker) gone() { w.goneOnce.Do(func() { close(w.goneCh) }) }

func (w *podWorker) markDirty() {
	select {
	case w.dirty <- struct{}{}:
	default:
	}
}

func (w *podWorker) current() *corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod
}

func (w *podWorker) name() string { p := w.current(); return p.Namespace + "/" + p.Name }

func (w *podWorker) run(ctx context.Context) {
	log := w.k.log.With("pod", w.name())
	defer w.k.removeWorker(w.current().UID)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Setup is retried: right after a pod is bound, the Node authorizer may not yet know it
	// and refuse the pod's tokens, configmaps and secrets.
	for attempt := 0; ; attempt++ {
		err := w.setup(ctx)
		if err == nil {
			break
		}
		log.Warn("pod setup failed; retrying", "err", err, "attempt", attempt)
		w.mu.Lock()
		w.setupErr = err.Error()
		w.mu.Unlock()
		w.markDirty()
		select {
		case <-ctx.Done():
			return
		case <-w.goneCh:
			w.teardown()
			return
		case <-w.changed:
			if p := w.current(); p.DeletionTimestamp != nil {
				w.teardown()
				w.k.forget(ctx, p)
				return
			}
		case <-w.dirty:
			_ = w.writeStatus(ctx)
		case <-time.After(time.Duration(min(attempt+1, 5)) * time.Second):
		}
	}
	w.mu.Lock()
	w.setupOK, w.setupErr = true, ""
	w.mu.Unlock()
	for _, c := range w.ctrs {
		go w.supervise(ctx, c)
	}
	w.markDirty()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.goneCh:
			w.stop(0)
			w.teardown()
			return
		case <-w.dirty:
			if err := w.writeStatus(ctx); err != nil && ctx.Err() == nil {
				log.Warn("pod status", "err", err)
				time.AfterFunc(time.Second, w.markDirty)
			}
		case <-w.changed:
			p := w.current()
			if p.DeletionTimestamp == nil {
				// Another writer changed the status (kube-controller-manager marks every pod of
				// a node NotReady when the node's heartbeats stopped, after an API server
				// outage): put ours back, as the real kubelet's status manager does.
				if w.readyDiffers(p) {
					w.markDirty()
				}
				continue
			}
			grace := int64(30)
			if p.DeletionGracePeriodSeconds != nil {
				grace = *p.DeletionGracePeriodSeconds
			}
			log.Info("stopping pod", "grace", grace)
			w.stop(time.Duration(grace) * time.Second)
			w.teardown()
			_ = w.writeStatus(ctx)
			w.k.forget(ctx, p)
			return
		}
	}
}

// setup makes the pod's network namespace and volumes.
func (w *podWorker) setup(ctx context.Context) error {
	p := w.current()
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return err
	}
	w.mu.Lock()
	done := w.ip.IsValid() && (p.Spec.HostNetwork || w.netns != "")
	w.mu.Unlock()
	if done {
		return w.volumes(ctx, p)
	}
	if !p.Spec.HostNetwork {
		ip, err := w.k.allocIP(p.UID)
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.ip = ip
		w.mu.Unlock()
		ns, err := w.k.sandbox(ip)
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.netns = ns
		w.mu.Unlock()
	} else {
		w.mu.Lock()
		w.ip = w.k.o.NodeIP
		w.mu.Unlock()
	}
	return w.volumes(ctx, p)
}

// teardown removes the pod's sandbox and files.
func (w *podWorker) teardown() {
	host := w.current().Spec.HostNetwork
	w.mu.Lock()
	ns, ip := w.netns, w.ip
	w.netns = ""
	w.mu.Unlock()
	if ns != "" {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			w.k.log.Warn("delete pod namespace", "netns", ns, "err", err, "out", strings.TrimSpace(string(out)))
		}
	}
	if ip.IsValid() && !host {
		w.k.releaseIP(ip)
	}
	_ = os.RemoveAll(w.dir)
}

// stop ends every container: SIGTERM, then SIGKILL after grace.
func (w *podWorker) stop(grace time.Duration) {
	for _, c := range w.ctrs {
		c.mu.Lock()
		c.stopping = true
		if c.proc != nil {
			sig := syscall.SIGTERM
			if grace == 0 {
				sig = syscall.SIGKILL
			}
			_ = syscall.Kill(-c.proc.Pid, sig)
		}
		c.mu.Unlock()
	}
	deadline := time.After(grace)
	for _, c := range w.ctrs {
		if !w.setupOK {
			break
		}
		select {
		case <-c.exited:
		case <-deadline:
			for _, c := range w.ctrs {
				c.mu.Lock()
				if c.proc != nil {
					_ = syscall.Kill(-c.proc.Pid, syscall.SIGKILL)
				}
				c.mu.Unlock()
			}
			<-c.exited
		}
	}
}

// supervise runs a container, restarting it as the pod's restartPolicy says.
func (w *podWorker) supervise(ctx context.Context, c *container) {
	defer close(c.exited)
	log := w.k.log.With("pod", w.name(), "container", c.spec.Name)
	backoff := time.Second
	for {
		c.mu.Lock()
		stopping := c.stopping
		c.mu.Unlock()
		if stopping || ctx.Err() != nil {
			return
		}
		cmd, err := w.start(ctx, c)
		if err != nil {
			log.Warn("container start", "err", err)
			c.mu.Lock()
			c.waiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerError", Message: err.Error()}
			var ie imageError
			if errors.As(err, &ie) {
				c.waiting.Reason = "ErrImagePull"
			}
			c.mu.Unlock()
			w.markDirty()
			if !sleep(ctx, 5*time.Second) {
				return
			}
			continue
		}
		started := time.Now()
		c.mu.Lock()
		c.proc, c.running, c.startedAt, c.waiting, c.ready = cmd.Process, true, started, nil, c.spec.ReadinessProbe == nil
		c.mu.Unlock()
		w.markDirty()
		probeCtx, stopProbes := context.WithCancel(ctx)
		if c.spec.ReadinessProbe != nil {
			go w.probe(probeCtx, c, c.spec.ReadinessProbe, func(ok bool) {
				c.mu.Lock()
				changed := c.ready != ok
				c.ready = ok
				c.mu.Unlock()
				if changed {
					w.markDirty()
				}
			})
		}
		if c.spec.LivenessProbe != nil {
			go w.probe(probeCtx, c, c.spec.LivenessProbe, func(ok bool) {
				if !ok {
					log.Info("liveness probe failed: restarting")
					_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				}
			})
		}
		err = cmd.Wait()
		stopProbes()
		code := int32(0)
		reason := "Completed"
		if err != nil {
			code, reason = 1, "Error"
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
					code = 128 + int32(st.Signal())
				} else {
					code = int32(ee.ExitCode())
				}
			}
		}
		c.mu.Lock()
		c.proc, c.running, c.ready = nil, false, false
		c.last = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason,
			StartedAt: metav1.NewTime(started), FinishedAt: metav1.Now()}
		stopping = c.stopping
		restart := !stopping
		switch w.current().Spec.RestartPolicy {
		case corev1.RestartPolicyNever:
			restart = false
		case corev1.RestartPolicyOnFailure:
			restart = restart && code != 0
		}
		c.done = !restart
		if restart {
			c.restarts++
			c.waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: fmt.Sprintf("back-off %s restarting failed container %s", backoff, c.spec.Name)}
		}
		c.mu.Unlock()
		w.markDirty()
		if !restart {
			return
		}
		log.Info("container exited; restarting", "code", code, "backoff", backoff)
		if time.Since(started) > 30*time.Second {
			backoff = time.Second
		}
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

type imageError struct{ error }

// start launches the container's process through the shim.
func (w *podWorker) start(ctx context.Context, c *container) (*exec.Cmd, error) {
	p := w.current()
	bin, imageID, err := w.k.resolveImage(c.spec.Image)
	if err != nil {
		return nil, imageError{err}
	}
	c.mu.Lock()
	c.imageID = imageID
	c.mu.Unlock()
	env, err := w.env(ctx, p, c.spec)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		vars[k] = v
	}
	argv := []string{bin}
	if len(c.spec.Command) > 0 {
		argv = expand(c.spec.Command, vars)
		if !strings.Contains(argv[0], "/") {
			if argv[0] == filepath.Base(bin) {
				argv[0] = bin
			} else if found, err := w.k.localImage(argv[0]); err == nil {
				argv[0] = found
			}
		}
	}
	argv = append(argv, expand(c.spec.Args, vars)...)
	spec := ShimSpec{Argv: argv, Env: env, Dir: c.spec.WorkingDir}
	if !p.Spec.HostNetwork {
		spec.Hostname = p.Name
		if len(spec.Hostname) > 63 {
			spec.Hostname = spec.Hostname[:63]
		}
	}
	for _, m := range c.spec.VolumeMounts {
		if err := checkMountTarget(m.MountPath); err != nil {
			return nil, err
		}
		src := filepath.Join(w.dir, "volumes", m.Name)
		for _, v := range p.Spec.Volumes {
			if v.Name == m.Name && v.HostPath != nil {
				src = v.HostPath.Path
			}
		}
		if m.SubPath != "" {
			src = filepath.Join(src, m.SubPath)
		}
		spec.Mounts = append(spec.Mounts, Mount{Source: src, Target: m.MountPath, ReadOnly: m.ReadOnly})
	}
	sc := effectiveSecurity(p, c.spec)
	spec.UID, spec.GID, spec.ReadOnlyRoot = sc.uid, sc.gid, sc.readOnlyRoot
	spec.Caps, spec.AllCaps, spec.NoNewPrivs = sc.caps, sc.privileged, sc.noNewPrivs
	if sc.runAsNonRoot && (sc.uid == nil || *sc.uid == 0) {
		return nil, fmt.Errorf("container has runAsNonRoot and would run as root (set runAsUser)")
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	specPath := filepath.Join(w.dir, c.spec.Name+".shim.json")
	if err := os.WriteFile(specPath, data, 0o600); err != nil {
		return nil, err
	}
	ns := w.netns
	if p.Spec.HostNetwork {
		ns = w.k.o.NodeNetns
	}
	args := append([]string{"netns", "exec", ns}, w.k.o.Shim...)
	cmd := exec.Command("ip", append(args, specPath)...)
	logDir := filepath.Join(w.k.o.StateDir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(logDir, fmt.Sprintf("%s_%s_%s.log", p.Namespace, p.Name, c.spec.Name)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	_ = os.WriteFile(filepath.Join(w.dir, c.spec.Name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	return cmd, nil
}

type security struct {
	uid, gid                                           *int64
	runAsNonRoot, readOnlyRoot, privileged, noNewPrivs bool
	caps                                               []string
}

func effectiveSecurity(p *corev1.Pod, c corev1.Container) security {
	var s security
	if ps := p.Spec.SecurityContext; ps != nil {
		s.uid, s.gid = ps.RunAsUser, ps.RunAsGroup
		s.runAsNonRoot = ptr.Deref(ps.RunAsNonRoot, false)
	}
	var add, drop []string
	if cs := c.SecurityContext; cs != nil {
		if cs.RunAsUser != nil {
			s.uid = cs.RunAsUser
		}
		if cs.RunAsGroup != nil {
			s.gid = cs.RunAsGroup
		}
		if cs.RunAsNonRoot != nil {
			s.runAsNonRoot = *cs.RunAsNonRoot
		}
		s.readOnlyRoot = ptr.Deref(cs.ReadOnlyRootFilesystem, false)
		s.privileged = ptr.Deref(cs.Privileged, false)
		s.noNewPrivs = cs.AllowPrivilegeEscalation != nil && !*cs.AllowPrivilegeEscalation
		if cs.Capabilities != nil {
			for _, a := range cs.Capabilities.Add {
				add = append(add, string(a))
			}
			for _, d := range cs.Capabilities.Drop {
				drop = append(drop, string(d))
			}
		}
	}
	s.caps = capSet(add, drop)
	return s
}

// expand replaces $(VAR) references as Kubernetes does; $$ escapes a dollar.
func expand(in []string, vars map[string]string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		var b strings.Builder
		for j := 0; j < len(s); j++ {
			if s[j] == '$' && j+1 < len(s) {
				if s[j+1] == '$' {
					b.WriteByte('$')
					j++
					continue
				}
				if s[j+1] == '(' {
					if end := strings.IndexByte(s[j:], ')'); end > 0 {
						if v, ok := vars[s[j+2:j+end]]; ok {
							b.WriteString(v)
							j += end
							continue
						}
					}
				}
			}
			b.WriteByte(s[j])
		}
		out[i] = b.String()
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// readyDiffers reports whether p's Ready condition in the API is not what this kubelet
// knows of its containers.
func (w *podWorker) readyDiffers(p *corev1.Pod) bool {
	ready := len(w.ctrs) > 0
	for _, c := range w.ctrs {
		c.mu.Lock()
		ready = ready && c.ready && c.running
		c.mu.Unlock()
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return (c.Status == corev1.ConditionTrue) != ready
		}
	}
	return ready
}

// writeStatus reports the pod's phase, IPs, conditions and container states.
func (w *podWorker) writeStatus(ctx context.Context) error {
	w.mu.Lock()
	ip, setupErr, setupOK := w.ip, w.setupErr, w.setupOK
	w.mu.Unlock()
	cur := w.current()
	now := metav1.Now()
	var statuses []corev1.ContainerStatus
	allReady, anyStarted, allDone, allZero := true, false, true, true
	for _, c := range w.ctrs {
		c.mu.Lock()
		imageID := c.imageID
		if imageID == "" {
			imageID = "skein-lab://" + c.spec.Image
		}
		st := corev1.ContainerStatus{Name: c.spec.Name, Image: c.spec.Image, ImageID: imageID,
			Ready: c.ready, RestartCount: c.restarts, Started: ptr.To(c.running)}
		switch {
		case c.running:
			st.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt)}
			st.ContainerID = fmt.Sprintf("skein-lab://%d", c.proc.Pid)
		case c.done && c.last != nil:
			st.State.Terminated = c.last
		case c.waiting != nil:
			st.State.Waiting = c.waiting
		default:
			st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		if !setupOK && setupErr != "" {
			st.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: setupErr}}
		}
		if c.last != nil && !c.done {
			st.LastTerminationState.Terminated = c.last
		}
		allReady = allReady && c.ready
		anyStarted = anyStarted || c.running || c.last != nil
		allDone = allDone && c.done
		allZero = allZero && (c.last == nil || c.last.ExitCode == 0)
		c.mu.Unlock()
		statuses = append(statuses, st)
	}
	phase := corev1.PodPending
	switch {
	case allDone && allZero:
		phase = corev1.PodSucceeded
	case allDone:
		phase = corev1.PodFailed
	case anyStarted:
		phase = corev1.PodRunning
	}
	cond := func(t corev1.PodConditionType, ok bool) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
		}
		c := corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now}
		for _, old := range cur.Status.Conditions {
			if old.Type == t && old.Status == s {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		return c
	}
	ready := allReady && phase == corev1.PodRunning
	for attempt := 0; ; attempt++ {
		p, err := w.k.cs.CoreV1().Pods(cur.Namespace).Get(ctx, cur.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if p.UID != cur.UID {
			return nil
		}
		p.Status.Phase = phase
		p.Status.HostIP = w.k.o.NodeIP.String()
		p.Status.HostIPs = []corev1.HostIP{{IP: p.Status.HostIP}}
		if ip.IsValid() {
			p.Status.PodIP = ip.String()
			p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}}
		}
		if p.Status.StartTime == nil {
			p.Status.StartTime = &now
		}
		p.Status.Conditions = []corev1.PodCondition{
			cond(corev1.PodScheduled, true), cond(corev1.PodInitialized, true),
			cond(corev1.ContainersReady, ready), cond(corev1.PodReady, ready),
		}
		p.Status.ContainerStatuses = statuses
		_, err = w.k.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err == nil || !apierrors.IsConflict(err) || attempt >= 3 {
			return err
		}
	}
}
