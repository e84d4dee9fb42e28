//! Tensor names and shapes of the Oobleck VAE GGUF (`general.architecture = yue2-vae`).
//!
//! Weight-normalised convolutions keep their raw `weight_g` / `weight_v` pair plus `bias`;
//! snakes keep their log-scale `alpha` / `beta`. Channel widths are read from the shapes at
//! load; the strides come from `yue2-vae.upsampling_ratios`.
//!
//! Decoder: `decoder.conv1` (latent -> C0, k=7), `decoder.block.{i}` = snake1 ->
//! conv_t1 (stride s, k = 2s) -> res_unit{1,2,3}, then `decoder.snake1`, `decoder.conv2`
//! (-> 2 channels, k=7). A res unit: snake1 -> conv1 (k=7, dilation 1/3/9) -> snake2 ->
//! conv2 (k=1), plus the skip. The encoder mirrors it and ends on 2 * latent channels
//! (mean and log variance).

/// Dilations of the three residual units of a block.
pub const RES_DILATIONS: [usize; 3] = [1, 3, 9];

/// Shapes (`ne`, innermost first) of a weight-normalised conv1d with kernel `k`.
pub fn wn_conv(prefix: &str, cin: usize, cout: usize, k: usize) -> Vec<(String, Vec<i64>)> {
    vec![
        (format!("{prefix}.weight_g"), vec![1, 1, cout as i64]),
        (format!("{prefix}.weight_v"), vec![k as i64, cin as i64, cout as i64]),
        (format!("{prefix}.bias"), vec![cout as i64]),
    ]
}

/// Shapes of a weight-normalised ConvTranspose1d (torch weight [Cin, Cout, K], norm per input channel).
pub fn wn_conv_t(prefix: &str, cin: usize, cout: usize, k: usize) -> Vec<(String, Vec<i64>)> {
    vec![
        (format!("{prefix}.weight_g"), vec![1, 1, cin as i64]),
        (format!("{prefix}.weight_v"), vec![k as i64, cout as i64, cin as i64]),
        (format!("{prefix}.bias"), vec![cout as i64]),
    ]
}

pub fn snake(prefix: &str, c: usize) -> Vec<(String, Vec<i64>)> {
    vec![(format!("{prefix}.alpha"), vec![c as i64]), (format!("{prefix}.beta"), vec![c as i64])]
}

fn res_unit(prefix: &str, c: usize) -> Vec<(String, Vec<i64>)> {
    let mut v = snake(&format!("{prefix}.snake1"), c);
    v.extend(wn_conv(&format!("{prefix}.conv1"), c, c, 7));
    v.extend(snake(&format!("{prefix}.snake2"), c));
    v.extend(wn_conv(&format!("{prefix}.conv2"), c, c, 1));
    v
}

/// Decoder tensors for widths `channels` (C0 .. C_n, one more than strides) and `strides`.
pub fn decoder_shapes(
    latent: usize,
    channels: &[usize],
    strides: &[usize],
    audio_channels: usize,
) -> Vec<(String, Vec<i64>)> {
    assert_eq!(channels.len(), strides.len() + 1);
    let mut v = wn_conv("decoder.conv1", latent, channels[0], 7);
    for (i, &s) in strides.iter().enumerate() {
        let p = format!("decoder.block.{i}");
        v.extend(snake(&format!("{p}.snake1"), channels[i]));
        v.extend(wn_conv_t(&format!("{p}.conv_t1"), channels[i], channels[i + 1], 2 * s));
        for r in 0..3 {
            v.extend(res_unit(&format!("{p}.res_unit{}", r + 1), channels[i + 1]));
        }
    }
    let last = *channels.last().unwrap();
    v.extend(snake("decoder.snake1", last));
    v.extend(wn_conv("decoder.conv2", last, audio_channels, 7));
    v
}

/// Encoder tensors: the mirror of the decoder (widths reversed, strided convs down).
pub fn encoder_shapes(
    latent: usize,
    channels: &[usize],
    strides: &[usize],
    audio_channels: usize,
) -> Vec<(String, Vec<i64>)> {
    assert_eq!(channels.len(), strides.len() + 1);
    let ch: Vec<usize> = channels.iter().rev().copied().collect();
    let st: Vec<usize> = strides.iter().rev().copied().collect();
    let mut v = wn_conv("encoder.conv1", audio_channels, ch[0], 7);
    for (i, &s) in st.iter().enumerate() {
        let p = format!("encoder.block.{i}");
        for r in 0..3 {
            v.extend(res_unit(&format!("{p}.res_unit{}", r + 1), ch[i]));
        }
        v.extend(snake(&format!("{p}.snake1"), ch[i]));
        v.extend(wn_conv(&format!("{p}.conv1"), ch[i], ch[i + 1], 2 * s));
    }
    let last = *ch.last().unwrap();
    v.extend(snake("encoder.snake1", last));
    v.extend(wn_conv("encoder.conv2", last, 2 * latent, 3));
    v
}
