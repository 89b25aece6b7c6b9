package cluster

import (
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeConfig is how to reach the API server: the kubeconfig file at path, or with path "",
// the pod's own service account (in-cluster).
func KubeConfig(path string) (*rest.Config, error) {
	if path == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("not in a Kubernetes pod (%v): give --kubeconfig FILE", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return c, nil
}

// Namespace is where a node in a pod keeps its Lease when --cluster-namespace is not set:
// the pod's namespace, else default.
func Namespace() string {
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if ns := strings.TrimSpace(string(b)); err == nil && ns != "" {
		return ns
	}
	return "default"
}
