//! The Qwen3.5 tokenizer shipped in `data/` gives, on wiki.test.raw tokenized whole, exactly
//! the token count and id hash of the brief's example report (and of llama.cpp's windows).

use std::path::Path;

use lse_runtime::model::tokenizer::TextTokenizer;
use lse_runtime::scoring::token_ids_sha256;

#[test]
fn wikitext_test_set_gives_the_briefs_token_count_and_hash() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let tokenizer = TextTokenizer::load(&repo.join("data/qwen35-tokenizer"))
        .unwrap()
        .expect("tokenizer.json is shipped");
    let text = std::fs::read_to_string(repo.join("data/wikitext-2-raw/wiki.test.raw")).unwrap();
    let ids = tokenizer.encode(&text).unwrap();
    assert_eq!(ids.len(), 297_193);
    assert_eq!(
        token_ids_sha256(&ids),
        "e0847dfdf2218cba0f786294f70732f1dc28e42723752e477cf640a298da9072"
    );
}
