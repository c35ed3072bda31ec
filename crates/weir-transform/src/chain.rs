//! A route's chain of stages, planned per response (in progress).
