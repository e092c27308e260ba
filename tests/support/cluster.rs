//! A JetStream cluster of real nats-servers on loopback: each node a [`LocalNatsServer`] with
//! its own store and a config file naming it and routing to every node, so a node killed with
//! SIGKILL restarts on its client and cluster ports and rejoins.

use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};

/// Nodes `n0`, `n1`, ... of one cluster.
pub struct NatsCluster {
    nodes: Vec<LocalNatsServer>,
}

impl NatsCluster {
    /// Starts `size` clustered nodes (configs and stores under `dir`) and waits until the
    /// cluster has a JetStream meta leader.
    pub fn start(dir: &Path, size: usize) -> NatsCluster {
        // The route ports must be known before any node starts: each config lists them all.
        let listeners: Vec<TcpListener> = (0..size)
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port"))
            .collect();
        let route_ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        drop(listeners);
        let routes: Vec<String> = route_ports
            .iter()
            .map(|p| format!("\"nats-route://127.0.0.1:{p}\""))
            .collect();
        let nodes = route_ports
            .iter()
            .enumerate()
            .map(|(i, port)| {
                let config = dir.join(format!("n{i}.conf"));
                std::fs::write(
                    &config,
                    format!(
                        "server_name: n{i}\n\
                         cluster {{\n  name: caprl-test\n  listen: \"127.0.0.1:{port}\"\n  \
                         routes: [{}]\n}}\n",
                        routes.join(", ")
                    ),
                )
                .unwrap();
                LocalNatsServer::start(LocalNatsServerOptions {
                    store_dir: Some(dir.join(format!("n{i}-store"))),
                    config_file: Some(config),
                    ..LocalNatsServerOptions::default()
                })
                .unwrap_or_else(|e| panic!("cluster node n{i}: {e}"))
            })
            .collect();
        let cluster = NatsCluster { nodes };
        cluster.wait_for_jetstream(Duration::from_secs(30));
        cluster
    }

    /// Every node's client URL, comma-separated, as `--nats-url` takes them.
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(LocalNatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index of the node called `name` (`n<i>`).
    pub fn index_of(&self, name: &str) -> usize {
        name.strip_prefix('n')
            .and_then(|i| i.parse().ok())
            .filter(|i| *i < self.nodes.len())
            .unwrap_or_else(|| panic!("no cluster node {name:?}"))
    }

    /// Kills node `i` with SIGKILL; its store stays.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].stop();
    }

    /// Starts node `i` again on its ports and store.
    pub fn restart(&mut self, i: usize) {
        self.nodes[i]
            .restart()
            .unwrap_or_else(|e| panic!("cluster node n{i} restarts: {e}"));
    }

    /// The last lines every node logged, for failure messages.
    pub fn log_tails(&self) -> String {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| format!("--- n{i}\n{}", n.log_tail()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The leader of `stream` and whether each of its followers is current, as node names.
    pub fn stream_placement(&self, stream: &str) -> Option<Placement> {
        let stream = stream.to_string();
        let urls = self.urls();
        let placement = |js: async_nats::jetstream::Context| async move {
            let cluster = js
                .get_stream(&stream)
                .await
                .ok()?
                .cached_info()
                .cluster
                .clone()?;
            Some(Placement {
                leader: cluster.leader?,
                followers: cluster
                    .replicas
                    .iter()
                    .map(|r| (r.name.clone(), r.current))
                    .collect(),
            })
        };
        self.on_any_node(placement, &urls)
    }

    /// Waits until the cluster places a stream on every node (a probe stream, created and
    /// deleted).
    fn wait_for_jetstream(&self, limit: Duration) {
        let started = Instant::now();
        let urls = self.urls();
        while started.elapsed() < limit {
            let ready = self.on_any_node(
                |js| async move {
                    let probe = async_nats::jetstream::stream::Config {
                        name: "cluster-probe".into(),
                        num_replicas: self.nodes.len(),
                        ..Default::default()
                    };
                    js.get_or_create_stream(probe).await.ok()?;
                    js.delete_stream("cluster-probe").await.ok().map(|_| ())
                },
                &urls,
            );
            if ready.is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "the cluster elected no JetStream leader in {limit:?}:\n{}",
            self.log_tails()
        );
    }

    fn on_any_node<T, F, Fut>(&self, f: F, urls: &str) -> Option<T>
    where
        F: FnOnce(async_nats::jetstream::Context) -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let servers: Vec<String> = urls.split(',').map(str::to_string).collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let client = tokio::time::timeout(
                Duration::from_secs(5),
                async_nats::ConnectOptions::new()
                    .connection_timeout(Duration::from_secs(2))
                    .connect(servers),
            )
            .await
            .ok()?
            .ok()?;
            let js = async_nats::jetstream::new(client);
            tokio::time::timeout(Duration::from_secs(5), f(js))
                .await
                .ok()
                .flatten()
        })
    }
}

/// Where a replicated stream lives: its leader and its followers (name, caught up).
#[derive(Debug, Clone)]
pub struct Placement {
    pub leader: String,
    pub followers: Vec<(String, bool)>,
}
