"""Who calls and what they may reach.

- identity.py: Identity: account > user > peer, and the role
- visibility.py: View: what an identity may read, decided in this one place
- key_view.py: KeyView: a View applied to an account's blob keys, for whole-tree walks
- call_context.py: the call's tenant and request metadata, set at the edges
"""

__all__ = ["call_context", "identity", "key_view", "visibility"]
