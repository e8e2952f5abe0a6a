package kubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// podGateway is the address pods route through: the node's side of each pod veth answers ARP
// for it (proxy_arp), so the node needs no address in the pod CIDR.
const podGateway = "169.254.1.1"

// sandbox makes a pod's network namespace with ip on a veth to the node.
//
//	ip netns add NS; ip link add lvXXXX type veth peer name eth0 netns NS
//	ip route add IP/32 dev lvXXXX                       (node)
//	ip addr add IP/32 dev eth0; ip route add default via 169.254.1.1 dev eth0 onlink  (pod)
func (k *Kubelet) sandbox(ip netip.Addr) (string, error) {
	a := ip.As4()
	ns := fmt.Sprintf("%s%d-%d", k.o.NetnsPrefix, a[2], a[3])
	veth := fmt.Sprintf("lv%02x%02x", a[2], a[3])
	_ = exec.Command("ip", "netns", "del", ns).Run() // a leftover of an earlier kubelet
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"sysctl", "-qw", "net.ipv4.conf." + veth + ".proxy_arp=1"},
		{"ip", "link", "set", veth, "up"},
		{"ip", "route", "replace", ip.String() + "/32", "dev", veth, "scope", "link"},
		{"ip", "-n", ns, "addr", "add", ip.String() + "/32", "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		{"ip", "-n", ns, "route", "add", "default", "via", podGateway, "dev", "eth0", "onlink"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			_ = exec.Command("ip", "netns", "del", ns).Run()
			return "", fmt.Errorf("pod network: %s: %w: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return ns, nil
}

// volumes writes the pod's volumes under w.dir/volumes.
func (w *podWorker) volumes(ctx context.Context, p *corev1.Pod) error {
	for _, v := range p.Spec.Volumes {
		dir := filepath.Join(w.dir, "volumes", v.Name)
		if v.HostPath != nil {
			if _, err := os.Stat(v.HostPath.Path); err != nil {
				return fmt.Errorf("volume %s: hostPath %s: the lab's kubelet only mounts paths that exist: %w", v.Name, v.HostPath.Path, err)
			}
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var err error
		switch {
		case v.EmptyDir != nil:
			err = os.Chmod(dir, 0o777)
		case v.ConfigMap != nil:
			err = w.configMapFiles(ctx, p, dir, v.ConfigMap.Name, v.ConfigMap.Items, ptr.Deref(v.ConfigMap.Optional, false))
		case v.Secret != nil:
			err = w.secretFiles(ctx, p, dir, v.Secret.SecretName, v.Secret.Items, ptr.Deref(v.Secret.Optional, false))
		case v.DownwardAPI != nil:
			err = w.downwardFiles(p, dir, v.DownwardAPI.Items)
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				switch {
				case src.ServiceAccountToken != nil:
					err = w.tokenFile(ctx, p, dir, src.ServiceAccountToken)
				case src.ConfigMap != nil:
					err = w.configMapFiles(ctx, p, dir, src.ConfigMap.Name, src.ConfigMap.Items, ptr.Deref(src.ConfigMap.Optional, false))
				case src.Secret != nil:
					err = w.secretFiles(ctx, p, dir, src.Secret.Name, src.Secret.Items, ptr.Deref(src.Secret.Optional, false))
				case src.DownwardAPI != nil:
					err = w.downwardFiles(p, dir, src.DownwardAPI.Items)
				}
				if err != nil {
					break
				}
			}
		default:
			err = fmt.Errorf("this kind of volume is not supported by the lab's kubelet (emptyDir, configMap, secret, downwardAPI, projected and existing hostPath are)")
		}
		if err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
	}
	return nil
}

func writeKeys(dir string, data map[string][]byte, items []corev1.KeyToPath) error {
	if len(items) == 0 {
		for k := range data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("key %s not found", it.Key)
		}
		path := filepath.Join(dir, it.Path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, v, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (w *podWorker) configMapFiles(ctx context.Context, p *corev1.Pod, dir, name string, items []corev1.KeyToPath, optional bool) error {
	cm, err := w.k.cs.CoreV1().ConfigMaps(p.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if optional {
			return nil
		}
		return fmt.Errorf("configmap %s: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return writeKeys(dir, data, items)
}

func (w *podWorker) secretFiles(ctx context.Context, p *corev1.Pod, dir, name string, items []corev1.KeyToPath, optional bool) error {
	s, err := w.k.cs.CoreV1().Secrets(p.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if optional {
			return nil
		}
		return fmt.Errorf("secret %s: %w", name, err)
	}
	return writeKeys(dir, s.Data, items)
}

func (w *podWorker) downwardFiles(p *corev1.Pod, dir string, items []corev1.DownwardAPIVolumeFile) error {
	for _, it := range items {
		if it.FieldRef == nil {
			return fmt.Errorf("downwardAPI %s: only fieldRef is supported by the lab's kubelet", it.Path)
		}
		v, err := w.fieldValue(p, it.FieldRef.FieldPath)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, it.Path), []byte(v), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// tokenFile asks the API for a service-account token bound to the pod (TokenRequest), as the
// kubelet does for projected volumes.
func (w *podWorker) tokenFile(ctx context.Context, p *corev1.Pod, dir string, src *corev1.ServiceAccountTokenProjection) error {
	sa := p.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: src.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
	}}
	if src.Audience != "" {
		tr.Spec.Audiences = []string{src.Audience}
	}
	out, err := w.k.cs.CoreV1().ServiceAccounts(p.Namespace).CreateToken(ctx, sa, tr, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for service account %s: %w", sa, err)
	}
	return os.WriteFile(filepath.Join(dir, src.Path), []byte(out.Status.Token), 0o644)
}

// fieldValue resolves a downward-API field path.
func (w *podWorker) fieldValue(p *corev1.Pod, path string) (string, error) {
	w.mu.Lock()
	ip := w.ip
	w.mu.Unlock()
	switch path {
	case "metadata.name":
		return p.Name, nil
	case "metadata.namespace":
		return p.Namespace, nil
	case "metadata.uid":
		return string(p.UID), nil
	case "spec.nodeName":
		return p.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return w.k.o.NodeIP.String(), nil
	case "status.podIP", "status.podIPs":
		if ip.IsValid() {
			return ip.String(), nil
		}
		return "", nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": p.Labels, "metadata.annotations": p.Annotations} {
		if strings.HasPrefix(path, prefix+"['") && strings.HasSuffix(path, "']") {
			return m[strings.TrimSuffix(strings.TrimPrefix(path, prefix+"['"), "']")], nil
		}
	}
	return "", fmt.Errorf("fieldRef %s is not supported by the lab's kubelet", path)
}

// env is the container's environment.
func (w *podWorker) env(ctx context.Context, p *corev1.Pod, c corev1.Container) ([]string, error) {
	api := w.k.o.APIServer
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOSTNAME=" + p.Name,
		"HOME=/tmp",
	}
	if api.IsValid() {
		env = append(env, "KUBERNETES_SERVICE_HOST="+api.Addr().String(), "KUBERNETES_SERVICE_PORT="+strconv.Itoa(int(api.Port())),
			fmt.Sprintf("KUBERNETES_PORT=tcp://%s", api))
	}
	for _, from := range c.EnvFrom {
		var data map[string][]byte
		switch {
		case from.ConfigMapRef != nil:
			cm, err := w.k.cs.CoreV1().ConfigMaps(p.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				if ptr.Deref(from.ConfigMapRef.Optional, false) {
					continue
				}
				return nil, fmt.Errorf("envFrom configmap %s: %w", from.ConfigMapRef.Name, err)
			}
			data = map[string][]byte{}
			for k, v := range cm.Data {
				data[k] = []byte(v)
			}
		case from.SecretRef != nil:
			s, err := w.k.cs.CoreV1().Secrets(p.Namespace).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				if ptr.Deref(from.SecretRef.Optional, false) {
					continue
				}
				return nil, fmt.Errorf("envFrom secret %s: %w", from.SecretRef.Name, err)
			}
			data = s.Data
		}
		for k, v := range data {
			env = append(env, from.Prefix+k+"="+string(v))
		}
	}
	vars := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		if e.Value != "" {
			v = expand([]string{v}, vars)[0]
		}
		if f := e.ValueFrom; f != nil {
			var err error
			switch {
			case f.FieldRef != nil:
				v, err = w.fieldValue(p, f.FieldRef.FieldPath)
			case f.ConfigMapKeyRef != nil:
				var cm *corev1.ConfigMap
				if cm, err = w.k.cs.CoreV1().ConfigMaps(p.Namespace).Get(ctx, f.ConfigMapKeyRef.Name, metav1.GetOptions{}); err == nil {
					v = cm.Data[f.ConfigMapKeyRef.Key]
				}
			case f.SecretKeyRef != nil:
				var s *corev1.Secret
				if s, err = w.k.cs.CoreV1().Secrets(p.Namespace).Get(ctx, f.SecretKeyRef.Name, metav1.GetOptions{}); err == nil {
					v = string(s.Data[f.SecretKeyRef.Key])
				}
			case f.ResourceFieldRef != nil:
				v = "0"
			}
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
		}
		vars[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	return env, nil
}

// probe runs a readiness or liveness probe and reports each result.
func (w *podWorker) probe(ctx context.Context, c *container, pr *corev1.Probe, report func(bool)) {
	period := time.Duration(max(pr.PeriodSeconds, 1)) * time.Second
	if pr.PeriodSeconds == 0 {
		period = 10 * time.Second
	}
	timeout := time.Duration(max(pr.TimeoutSeconds, 1)) * time.Second
	failures := max(pr.FailureThreshold, 1)
	if pr.FailureThreshold == 0 {
		failures = 3
	}
	if !sleep(ctx, time.Duration(pr.InitialDelaySeconds)*time.Second) {
		return
	}
	fails := int32(0)
	ok := false
	for {
		err := w.probeOnce(ctx, c, pr, timeout)
		if err == nil {
			fails, ok = 0, true
		} else {
			fails++
			if fails >= failures || !ok {
				ok = false
			}
		}
		report(ok)
		if !sleep(ctx, period) {
			return
		}
	}
}

func (w *podWorker) probeOnce(ctx context.Context, c *container, pr *corev1.Probe, timeout time.Duration) error {
	w.mu.Lock()
	ip := w.ip
	w.mu.Unlock()
	port := func(p intstr.IntOrString) (string, error) {
		if p.Type == intstr.Int {
			return strconv.Itoa(p.IntValue()), nil
		}
		for _, cp := range c.spec.Ports {
			if cp.Name == p.StrVal {
				return strconv.Itoa(int(cp.ContainerPort)), nil
			}
		}
		return "", fmt.Errorf("probe port %q names no port of the container", p.StrVal)
	}
	switch {
	case pr.HTTPGet != nil:
		pt, err := port(pr.HTTPGet.Port)
		if err != nil {
			return err
		}
		host := ip.String()
		if pr.HTTPGet.Host != "" {
			host = pr.HTTPGet.Host
		}
		scheme := strings.ToLower(string(pr.HTTPGet.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		cl := &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
		resp, err := cl.Get(scheme + "://" + net.JoinHostPort(host, pt) + pr.HTTPGet.Path)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("http status %d", resp.StatusCode)
		}
		return nil
	case pr.TCPSocket != nil:
		pt, err := port(pr.TCPSocket.Port)
		if err != nil {
			return err
		}
		conn, err := (&net.Dialer{Timeout: timeout}).DialContext(ctx, "tcp", net.JoinHostPort(ip.String(), pt))
		if err != nil {
			return err
		}
		return conn.Close()
	}
	return fmt.Errorf("only httpGet and tcpSocket probes are supported by the lab's kubelet")
}
