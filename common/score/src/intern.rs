//! Word → integer id interning, so every metric works on `u32` tokens.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use super::ngrams::KeyHasher;

/// Word table with a fast non-cryptographic hash (inputs are captions, not
/// adversarial keys).
type WordMap = HashMap<String, u32, BuildHasherDefault<KeyHasher>>;

/// Maps words to dense `u32` ids (0, 1, 2, … in order of first sight).
///
/// [`Interner::with_words`] seeds the table with a vocabulary so its ids can
/// be reused as they are; [`Interner::intern`] adds unseen words after them.
/// Ids `u32::MAX` (reserved by the n-gram packing) and
/// [`EOS_MARK`](super::eos::EOS_MARK) = `u32::MAX − 1` are never handed out.
#[derive(Debug, Clone, Default)]
pub struct Interner {
    ids: WordMap,
    words: Vec<String>,
}

impl Interner {
    /// An empty interner.
    pub fn new() -> Self {
        Self::default()
    }

    /// An interner whose ids `0..words.len()` are `words` in order. A word
    /// repeated in `words` keeps its first id (its later slot still counts,
    /// so positions stay aligned with the vocabulary).
    pub fn with_words(words: &[String]) -> Self {
        let mut ids = WordMap::with_capacity_and_hasher(words.len(), Default::default());
        for (i, w) in words.iter().enumerate() {
            ids.entry(w.clone()).or_insert(i as u32);
        }
        Self {
            ids,
            words: words.to_vec(),
        }
    }

    /// The id of `word`, adding it if new.
    ///
    /// # Panics
    /// If more than `u32::MAX - 2` distinct words are interned.
    pub fn intern(&mut self, word: &str) -> u32 {
        if let Some(&id) = self.ids.get(word) {
            return id;
        }
        let id = u32::try_from(self.words.len())
            .ok()
            .filter(|&id| id < super::eos::EOS_MARK)
            .expect("more than u32::MAX - 2 distinct words interned");
        self.ids.insert(word.to_owned(), id);
        self.words.push(word.to_owned());
        id
    }

    /// One image's references (each a list of words) as ids, adding new words.
    pub fn intern_refs(&mut self, refs: &[Vec<String>]) -> Vec<Vec<u32>> {
        refs.iter()
            .map(|ws| ws.iter().map(|w| self.intern(w)).collect())
            .collect()
    }

    /// Splits `text` on whitespace (the reference scorers' `str.split()`)
    /// and interns each word.
    pub fn intern_sentence(&mut self, text: &str) -> Vec<u32> {
        text.split_whitespace().map(|w| self.intern(w)).collect()
    }

    /// The id of `word` if it has been seen.
    pub fn get(&self, word: &str) -> Option<u32> {
        self.ids.get(word).copied()
    }

    /// The word behind `id`.
    pub fn word(&self, id: u32) -> Option<&str> {
        self.words.get(id as usize).map(String::as_str)
    }

    /// The words in id order (the vocabulary a [`DocFreq`](super::DocFreq) keeps).
    pub fn into_words(self) -> Vec<String> {
        self.words
    }

    /// Number of ids handed out.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// True when no word has been interned.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
}

/// Ids for words against a shared [`Interner`] that stays as it is: known
/// words keep their ids, unseen words get ids after the base's, kept in this
/// view only. Scoring text against a fixed table (its vocabulary the base)
/// then costs nothing per call for the table's words.
#[derive(Debug)]
pub struct LocalInterner<'a> {
    base: &'a Interner,
    extra: WordMap,
}

impl<'a> LocalInterner<'a> {
    /// A view of `base` with no words of its own yet.
    pub fn new(base: &'a Interner) -> Self {
        Self {
            base,
            extra: WordMap::default(),
        }
    }

    /// The id of `word`: the base's, else one of this view's own.
    ///
    /// # Panics
    /// If more than `u32::MAX - 2` distinct words are interned in all.
    pub fn intern(&mut self, word: &str) -> u32 {
        if let Some(id) = self.base.get(word) {
            return id;
        }
        if let Some(&id) = self.extra.get(word) {
            return id;
        }
        let id = u32::try_from(self.base.len() + self.extra.len())
            .ok()
            .filter(|&id| id < super::eos::EOS_MARK)
            .expect("more than u32::MAX - 2 distinct words interned");
        self.extra.insert(word.to_owned(), id);
        id
    }

    /// Splits `text` on whitespace and interns each word.
    pub fn intern_sentence(&mut self, text: &str) -> Vec<u32> {
        text.split_whitespace().map(|w| self.intern(w)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_ids_are_kept_and_new_words_follow() {
        let vocab: Vec<String> = ["<eos>", "a", "dog"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut it = Interner::with_words(&vocab);
        assert_eq!(it.intern("dog"), 2);
        assert_eq!(it.intern("cat"), 3);
        assert_eq!(it.intern_sentence("a  cat\tdog"), vec![1, 3, 2]);
        assert_eq!(it.word(3), Some("cat"));
        assert_eq!(it.get("bird"), None);
        let refs = vec![
            vec!["a".to_string(), "bird".to_string()],
            vec!["dog".to_string()],
        ];
        assert_eq!(it.intern_refs(&refs), vec![vec![1, 4], vec![2]]);
    }

    #[test]
    fn a_local_view_adds_words_after_the_base_and_leaves_it_alone() {
        let base = Interner::with_words(&["a".to_string(), "dog".to_string()]);
        let mut view = LocalInterner::new(&base);
        assert_eq!(
            view.intern_sentence("a cat dog cat bird"),
            vec![0, 2, 1, 2, 3]
        );
        assert_eq!(base.len(), 2);
        assert_eq!(base.get("cat"), None);
    }
}
