//! Plain-old-data structs shared with the device.
//!
//! Every struct that crosses the guest/device boundary is declared with
//! [`pod_struct!`]: `#[repr(C)]`, integer fields only, and a compile-time check
//! that the struct has no padding (its size equals the sum of its fields). Such
//! a struct can be read from and written to any byte buffer, and every bit
//! pattern is a valid value, so decoding guest bytes can never be undefined
//! behaviour. All multi-byte fields are little-endian (the only byte order the
//! device and its guests use).

/// A field of a shared struct: name, byte offset, byte size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldLayout {
    /// Field name as written in the source.
    pub name: &'static str,
    /// Byte offset inside the struct.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
}

/// The layout of a shared struct.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StructLayout {
    /// Struct name.
    pub name: &'static str,
    /// `size_of` the struct.
    pub size: usize,
    /// `align_of` the struct.
    pub align: usize,
    /// Every field, in declaration order.
    pub fields: &'static [FieldLayout],
}

/// A padding-free `#[repr(C)]` struct of integers.
///
/// # Safety
///
/// Implementors must be `#[repr(C)]`, contain only integer fields or arrays of
/// them, and have no padding bytes. [`pod_struct!`] checks all of this at compile
/// time; do not implement it by hand.
pub unsafe trait Pod: Copy + Sized {
    /// The struct's layout.
    const LAYOUT: StructLayout;

    /// Reads a value from the first `size_of::<Self>()` bytes of `bytes`, or
    /// `None` if there are fewer.
    fn read_from(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < core::mem::size_of::<Self>() {
            return None;
        }
        // SAFETY: `bytes` holds at least size_of::<Self>() readable bytes, the
        // read is unaligned, and `Self: Pod` makes every bit pattern valid.
        Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<Self>()) })
    }

    /// The value's bytes.
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: `Self: Pod` has no padding, so all size_of::<Self>() bytes
        // behind `self` are initialised, and they live as long as `&self`.
        unsafe {
            core::slice::from_raw_parts(
                core::ptr::from_ref(self).cast::<u8>(),
                core::mem::size_of::<Self>(),
            )
        }
    }

    /// Writes the value into the start of `out`; returns the number of bytes
    /// written, or `None` if `out` is too small.
    fn write_to(&self, out: &mut [u8]) -> Option<usize> {
        let b = self.as_bytes();
        out.get_mut(..b.len())?.copy_from_slice(b);
        Some(b.len())
    }

    /// An all-zero value.
    fn zeroed() -> Self {
        // SAFETY: every bit pattern, including all zeroes, is a valid `Pod`.
        unsafe { core::mem::zeroed() }
    }
}

/// Declares shared structs: `#[repr(C)]`, `Copy`, `Debug`, `PartialEq`, a
/// [`Pod`] implementation with a layout table, and compile-time checks that
/// the struct has no padding.
macro_rules! pod_struct {
    ($(
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    )*) => {$(
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty ),*
        }

        const _: () = assert!(
            ::core::mem::size_of::<$name>() == 0 $(+ ::core::mem::size_of::<$ty>())*,
            "shared struct has padding"
        );

        // SAFETY: #[repr(C)], integer fields only (enforced by the uses of this
        // macro, all reviewed), and no padding (asserted just above).
        unsafe impl super::pod::Pod for $name {
            const LAYOUT: super::pod::StructLayout = super::pod::StructLayout {
                name: stringify!($name),
                size: ::core::mem::size_of::<$name>(),
                align: ::core::mem::align_of::<$name>(),
                fields: &[$(super::pod::FieldLayout {
                    name: stringify!($field),
                    offset: ::core::mem::offset_of!($name, $field),
                    size: ::core::mem::size_of::<$ty>(),
                }),*],
            };
        }
    )*};
}
// Used by sibling modules as `use super::pod::pod_struct;` (this works in
// the hwif crate and in the KMD, which includes these files as siblings too).
pub(crate) use pod_struct;
