//! GNMT (Wu et al., 2016) as PipeDream trains it: the thesis's GNMT-8 and GNMT-16, MLPerf's
//! GNMT v2 in PyTorch, hidden size 1024 and a 32320-token BPE vocabulary (WMT16 English–German).
//!
//! Half the LSTM layers encode, half decode. The encoder embeds the source, runs a bidirectional
//! LSTM, an LSTM from its 2048 features down to 1024, then 1024-wide LSTMs with residual
//! connections. The decoder embeds the target, runs an LSTM whose output queries a Bahdanau
//! attention over the encoder's output, then LSTMs that read their input concatenated with the
//! attention context (2048 features), residual from the second on, and a per-token classifier
//! over the vocabulary. Parameters match PipeDream's own profiles of the two models exactly
//! (193,765,952 and 277,717,568 elements).
//!
//! A layer is a stage candidate, so its activation is what a stage boundary after it carries:
//! - encoder layers: their output sequence;
//! - the decoder's embedding: the embedded target and the encoder's output, which the attention
//!   reads;
//! - the attention layer and every decoder LSTM but the last: their output and the attention
//!   context, which the next LSTM reads concatenated (a concatenation node ends the layer);
//! - the last LSTM: its output; the classifier: the logits.
//!
//! A sample is a sentence pair of [`TOKENS`] tokens on each side: the length PipeDream profiled
//! GNMT-16 at, near WMT16's mean. The token ids that travel with the encoder are not counted
//! (eight bytes a token against 4 KiB of activations). Dropout is not a node, as elsewhere.

use super::builder::{Net, Shape};
use super::ModelProfile;

/// Tokens of each sentence of a sample (source and target alike).
pub const TOKENS: u64 = 25;
/// The BPE vocabulary.
const VOCAB: u64 = 32_320;
/// Hidden size of every LSTM and of the embeddings.
const HIDDEN: u64 = 1024;

/// GNMT with `lstm_layers` LSTM layers in all (8 or 16): half in the encoder (the bidirectional
/// one counted once), half in the decoder (the attention's LSTM included).
pub fn gnmt(lstm_layers: u64) -> ModelProfile {
    let half = (lstm_layers / 2).max(2);
    // A sample's input: the source's and the target's token ids (graph node 0).
    let input = Shape::new(2, TOKENS, 1);
    let mut net = Net::new(
        &format!("gnmt-{lstm_layers}"),
        &format!(
            "2x{TOKENS} token ids (a WMT16 En-De sentence pair, {VOCAB}-token BPE vocabulary)"
        ),
        input,
        true,
    );
    net.layer("encoder.embedder", |l, x| {
        l.embedding("encoder.embedder", x, VOCAB, HIDDEN)
    });
    net.layer("encoder.rnn_layers.0", |l, x| {
        l.lstm("encoder.rnn_layers.0", x, HIDDEN, 2)
    });
    net.layer("encoder.rnn_layers.1", |l, x| {
        l.lstm("encoder.rnn_layers.1", x, HIDDEN, 1)
    });
    for i in 2..half {
        let name = format!("encoder.rnn_layers.{i}");
        net.layer(&name, |l, x| {
            let y = l.lstm(&name, x, HIDDEN, 1);
            l.add(y, x)
        });
    }
    // The decoder's embedding reads the target ids (the input) and carries the encoder's output.
    let mut encoded = None;
    net.layer("decoder.embedder", |l, x| {
        encoded = Some(x);
        let y = l.embedding("decoder.embedder", input, VOCAB, HIDDEN);
        l.concat(&[y, x])
    });
    let encoded = encoded.expect("the encoder ran");
    let mut context = None;
    let mut previous = None;
    net.layer("decoder.att_rnn", |l, x| {
        let embedded = Shape::new(HIDDEN, x.h, x.w).at_node(x.node);
        let h = l.lstm("decoder.att_rnn.rnn", embedded, HIDDEN, 1);
        let ctx = l.attention("decoder.att_rnn.attn", h, encoded);
        context = Some(ctx);
        previous = Some(h);
        l.concat(&[h, ctx])
    });
    let context = context.expect("the attention ran");
    for i in 0..half - 1 {
        let name = format!("decoder.rnn_layers.{i}");
        let last = i + 2 == half;
        net.layer(&name, |l, x| {
            let mut y = l.lstm(&name, x, HIDDEN, 1);
            if i > 0 {
                y = l.add(y, previous.expect("a layer before"));
            }
            previous = Some(y);
            if last {
                y
            } else {
                l.concat(&[y, context])
            }
        });
    }
    net.layer("decoder.classifier", |l, x| {
        l.positionwise_fc("decoder.classifier.classifier", x, VOCAB)
    });
    net.finish()
}
