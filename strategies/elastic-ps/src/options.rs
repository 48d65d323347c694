//! The `[strategy.elastic-ps]` options, their defaults (the paper's, §1.11) and their validation.

use crate::psld::PsldParams;
use concord_engine::prelude::*;

/// Which placement policy distributes the parameter blocks over the servers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// PSLD: superior set by confidence bounds, exploit cost, ε-greedy (Algorithms 1–3).
    #[default]
    Psld,
    /// PSLD with ε = 0 (Fig. 18's "PSLD without exploration").
    PsldNoExplore,
    /// The proportional-reassignment strawman (§2 item 2).
    Strawman,
    /// MXNet's default (the paper's "Baseline"): big tensors split over all servers, small ones
    /// hashed by key; static.
    Mxnet,
    /// TensorFlow's default: whole tensors round-robin by count; static.
    Tf,
    /// PSLD's initial assignment (blocks of `block_bytes` round-robin), never changed.
    RoundRobin,
}

impl PolicyKind {
    /// The name as written in the config.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Psld => "psld",
            PolicyKind::PsldNoExplore => "psld-no-explore",
            PolicyKind::Strawman => "strawman",
            PolicyKind::Mxnet => "mxnet",
            PolicyKind::Tf => "tf",
            PolicyKind::RoundRobin => "round-robin",
        }
    }

    /// Whether the policy reassigns blocks while training.
    pub fn is_dynamic(self) -> bool {
        matches!(
            self,
            PolicyKind::Psld | PolicyKind::PsldNoExplore | PolicyKind::Strawman
        )
    }
}

/// How a stateful server moves blocks at a reassignment (§1.10).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MigrationMode {
    /// The paper's protocol: servers move blocks as soon as they reach the agreed version,
    /// overlapped with the pull responses of that step.
    #[default]
    Overlapped,
    /// The simpler fallback: blocks move only once every worker is blocked at the boundary
    /// (migration on the critical path).
    AfterBarrier,
}

/// A server announcing its departure (`DEL_SERVER`) once training reaches an iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Removal {
    /// The departing server.
    pub server: ServerId,
    /// Completed iterations after which it announces.
    pub at_iteration: u64,
}

/// Options of the `elastic-ps` strategy (`[strategy.elastic-ps]`). Every field has a default.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ElasticOptions {
    /// Placement policy (`psld`, `psld-no-explore`, `strawman`, `mxnet`, `tf`, `round-robin`).
    pub policy: String,
    /// Exploration probability ε in [0, 1]. Default 0.1.
    pub epsilon: f64,
    /// Weight θ0 of the normalised predicted time in the exploit cost. Default 1.
    pub theta0: f64,
    /// Weight θ1 of the workload share in the exploit cost. Default 1.
    pub theta1: f64,
    /// Confidence multiplier z of the bounds. Default 1.645 (90%).
    pub z: f64,
    /// Algorithm 1 also checks every remaining server's lower bound (off: the paper's loop).
    pub strict: bool,
    /// Straggler detection: reassign when (best − worst)/worst speed exceeds this. Default 1.
    pub var_threshold: f64,
    /// Scale out when the superior set is smaller than this fraction of the initial servers.
    /// Default 0.5.
    pub scale_threshold: f64,
    /// Iterations per telemetry report period (K). Default 20.
    pub report_every: u64,
    /// Report periods kept in the history window (H). Default 5.
    pub history: usize,
    /// Every this many periods, also reassign when a greedy assignment is predicted ≥ 10% faster
    /// (lets recovery be acted on, A7); 0 = the paper-literal trigger (variation only). Default 3.
    pub gain_check_every: u64,
    /// Launch new servers when the superior set is too small. Default true.
    pub scale_out: bool,
    /// Most servers the job may have (initial + launched); default twice the initial count.
    pub max_servers: Option<u32>,
    /// Seconds a newly launched server takes to start before it registers. Default 5.
    pub server_start_s: f64,
    /// Overlapped (default) or after-barrier migration.
    pub migration: MigrationMode,
    /// MXNet's big-array bound in elements (`MXNET_KVSTORE_BIGARRAY_BOUND`). Default 1,000,000.
    pub bigarray_bound: u64,
    /// Force a reassignment every this many report periods whatever the trigger says (0 = never;
    /// for consistency tests and overhead measurements).
    pub force_reassign_every: u64,
    /// Launch one server after each of these completed iterations (`ADD_SERVER`).
    pub add_server_at: Vec<u64>,
    /// Servers that announce their departure (`DEL_SERVER`) after an iteration.
    pub remove_servers: Vec<Removal>,
    /// Emulated checkpoint-and-restart: fixed relaunch cost in seconds (library reload, server
    /// initialisation, graph rebuild, data preprocessing). Default 60.
    pub restart_cost_s: f64,
    /// Emulated checkpoint-and-restart: storage bandwidth for saving and reloading the model,
    /// GB/s. Default 1.
    pub checkpoint_gbps: f64,
}

impl Default for ElasticOptions {
    fn default() -> Self {
        let p = PsldParams::default();
        ElasticOptions {
            policy: PolicyKind::Psld.name().to_string(),
            epsilon: p.epsilon,
            theta0: p.theta0,
            theta1: p.theta1,
            z: p.z,
            strict: p.strict,
            var_threshold: 1.0,
            scale_threshold: 0.5,
            report_every: 20,
            history: 5,
            gain_check_every: 3,
            scale_out: true,
            max_servers: None,
            server_start_s: 5.0,
            migration: MigrationMode::Overlapped,
            bigarray_bound: 1_000_000,
            force_reassign_every: 0,
            add_server_at: Vec::new(),
            remove_servers: Vec::new(),
            restart_cost_s: 60.0,
            checkpoint_gbps: 1.0,
        }
    }
}

/// Validated options, ready for the roles.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// The policy.
    pub policy: PolicyKind,
    /// Algorithm parameters (ε is 0 for `psld-no-explore`).
    pub psld: PsldParams,
    /// Detection threshold.
    pub var_threshold: f64,
    /// Scale-out threshold (fraction of the initial servers).
    pub scale_threshold: f64,
    /// Report period K.
    pub report_every: u64,
    /// History window H.
    pub history: usize,
    /// Periodic gain check (periods, 0 = off).
    pub gain_check_every: u64,
    /// Scale-out enabled.
    pub scale_out: bool,
    /// Initial servers M0.
    pub initial_servers: u32,
    /// Server roles in the job (M0 + standby).
    pub max_servers: u32,
    /// Launch time of a new server.
    pub server_start_s: f64,
    /// Migration mode.
    pub migration: MigrationMode,
    /// MXNet big-array bound.
    pub bigarray_bound: u64,
    /// Forced reassignment period (0 = never).
    pub force_reassign_every: u64,
    /// Scheduled launches (completed iterations), ascending.
    pub add_server_at: Vec<u64>,
    /// Scheduled departures, by iteration.
    pub remove_servers: Vec<Removal>,
    /// Emulated restart cost.
    pub restart_cost_s: f64,
    /// Emulated checkpoint storage bandwidth, bytes/s.
    pub checkpoint_bytes_per_s: f64,
}

impl ElasticOptions {
    /// Checks every option against the run and resolves defaults; errors name the key.
    pub fn resolve(&self, config: &RunConfig) -> Result<Resolved> {
        let key = |k: &str| format!("strategy.elastic-ps.{k}");
        let policy = match self.policy.as_str() {
            "psld" => PolicyKind::Psld,
            "psld-no-explore" => PolicyKind::PsldNoExplore,
            "strawman" => PolicyKind::Strawman,
            "mxnet" => PolicyKind::Mxnet,
            "tf" => PolicyKind::Tf,
            "round-robin" => PolicyKind::RoundRobin,
            other => return Err(EngineError::config(
                key("policy"),
                format!("\"{other}\""),
                "unknown policy; known: psld, psld-no-explore, strawman, mxnet, tf, round-robin",
            )),
        };
        if !(0.0..=1.0).contains(&self.epsilon) {
            return Err(EngineError::config(
                key("epsilon"),
                self.epsilon,
                "the exploration probability ε must be in [0, 1]",
            ));
        }
        for (k, v) in [("theta0", self.theta0), ("theta1", self.theta1)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(EngineError::config(
                    key(k),
                    v,
                    "must be a finite number ≥ 0",
                ));
            }
        }
        if self.theta0 + self.theta1 <= 0.0 {
            return Err(EngineError::config(
                key("theta0"),
                self.theta0,
                "theta0 and theta1 cannot both be 0",
            ));
        }
        let positive = [("z", self.z), ("checkpoint_gbps", self.checkpoint_gbps)];
        for (k, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(EngineError::config(
                    key(k),
                    v,
                    "must be a finite number > 0",
                ));
            }
        }
        let non_negative = [
            ("var_threshold", self.var_threshold),
            ("server_start_s", self.server_start_s),
            ("restart_cost_s", self.restart_cost_s),
        ];
        for (k, v) in non_negative {
            if !(v.is_finite() && v >= 0.0) {
                return Err(EngineError::config(
                    key(k),
                    v,
                    "must be a finite number ≥ 0",
                ));
            }
        }
        if !(0.0..=1.0).contains(&self.scale_threshold) {
            return Err(EngineError::config(
                key("scale_threshold"),
                self.scale_threshold,
                "a fraction of the initial servers, in [0, 1]",
            ));
        }
        if self.report_every == 0 {
            return Err(EngineError::config(key("report_every"), 0, "must be ≥ 1"));
        }
        if self.history == 0 {
            return Err(EngineError::config(key("history"), 0, "must be ≥ 1"));
        }
        let m0 = config.servers;
        let max_servers = self.max_servers.unwrap_or(2 * m0);
        if max_servers < m0 {
            return Err(EngineError::config(
                key("max_servers"),
                max_servers,
                format!("must be at least `servers` = {m0}"),
            ));
        }
        if !policy.is_dynamic()
            && (!self.add_server_at.is_empty() || !self.remove_servers.is_empty())
        {
            return Err(EngineError::config(
                key("policy"),
                format!("\"{}\"", policy.name()),
                "a static placement cannot add or remove servers; use psld, psld-no-explore or strawman",
            ));
        }
        let mut add_server_at = self.add_server_at.clone();
        add_server_at.sort_unstable();
        if m0 as usize + add_server_at.len() > max_servers as usize {
            return Err(EngineError::config(
                key("add_server_at"),
                format!("{:?}", self.add_server_at),
                format!(
                    "{m0} servers + {} launches exceed max_servers = {max_servers}",
                    add_server_at.len()
                ),
            ));
        }
        let mut remove_servers = self.remove_servers.clone();
        remove_servers.sort_by_key(|r| (r.at_iteration, r.server));
        let mut gone = std::collections::BTreeSet::new();
        for r in &remove_servers {
            if r.server >= max_servers {
                return Err(EngineError::config(
                    key("remove_servers"),
                    format!("server = {}", r.server),
                    format!("no such server (the job has at most {max_servers})"),
                ));
            }
            if !gone.insert(r.server) {
                return Err(EngineError::config(
                    key("remove_servers"),
                    format!("server = {}", r.server),
                    "listed twice",
                ));
            }
            // Servers present just after this removal: the initial ones and those launched by
            // then, minus those removed by then.
            let launched = add_server_at
                .iter()
                .filter(|&&a| a <= r.at_iteration)
                .count();
            let present = m0 as usize + launched;
            if r.server as usize >= present {
                return Err(EngineError::config(
                    key("remove_servers"),
                    format!("server = {}, at_iteration = {}", r.server, r.at_iteration),
                    format!(
                        "server {} has not been launched by iteration {}",
                        r.server, r.at_iteration
                    ),
                ));
            }
            if gone.len() >= present {
                return Err(EngineError::config(
                    key("remove_servers"),
                    format!("server = {}, at_iteration = {}", r.server, r.at_iteration),
                    "this removes the last server; a job needs at least one parameter server",
                ));
            }
        }
        let mut psld = PsldParams {
            epsilon: self.epsilon,
            theta0: self.theta0,
            theta1: self.theta1,
            z: self.z,
            strict: self.strict,
        };
        if policy == PolicyKind::PsldNoExplore {
            psld.epsilon = 0.0;
        }
        Ok(Resolved {
            policy,
            psld,
            var_threshold: self.var_threshold,
            scale_threshold: self.scale_threshold,
            report_every: self.report_every,
            history: self.history,
            gain_check_every: self.gain_check_every,
            scale_out: self.scale_out && policy.is_dynamic(),
            initial_servers: m0,
            max_servers: if policy.is_dynamic() { max_servers } else { m0 },
            server_start_s: self.server_start_s,
            migration: self.migration,
            bigarray_bound: self.bigarray_bound.max(1),
            force_reassign_every: self.force_reassign_every,
            add_server_at,
            remove_servers,
            restart_cost_s: self.restart_cost_s,
            checkpoint_bytes_per_s: self.checkpoint_gbps * 1e9,
        })
    }
}
