//! A tiny least-recently-used cache, for the demo corpus.

use std::collections::{HashMap, VecDeque};

/// Keeps at most `capacity` entries and evicts the least recently used one.
pub struct LruCache<K, V> {
    capacity: usize,
    map: HashMap<K, V>,
    order: VecDeque<K>,
}

impl<K: Clone + Eq + std::hash::Hash, V> LruCache<K, V> {
    pub fn new(capacity: usize) -> Self {
        LruCache { capacity, map: HashMap::new(), order: VecDeque::new() }
    }

    pub fn get(&mut self, key: &K) -> Option<&V> {
        if self.map.contains_key(key) {
            self.order.retain(|k| k != key);
            self.order.push_back(key.clone());
        }
        self.map.get(key)
    }

    pub fn put(&mut self, key: K, value: V) {
        if self.map.len() == self.capacity && !self.map.contains_key(&key) {
            if let Some(oldest) = self.order.pop_front() {
                self.map.remove(&oldest);
            }
        }
        self.order.retain(|k| k != &key);
        self.order.push_back(key.clone());
        self.map.insert(key, value);
    }
}
