//! Where a frame goes inside a link: point-to-point or learning switch.
//!
//! A 2-port link that is not a LAN sends every frame to the other port. A
//! LAN (3 or more ports, or `lan: true`) is a learning switch: it learns the
//! source MAC of every frame on the port it came from, sends unicast frames
//! to the learned port, and floods broadcast, multicast and unknown
//! destinations to every other port. A frame whose destination was learned
//! on its own port goes nowhere (as in a real switch). Pure logic, no I/O.

use std::collections::HashMap;

/// Most MAC addresses remembered; when full the table is cleared (flooding
/// until relearned), which keeps memory bounded against MAC floods.
pub const MAX_TABLE: usize = 4096;

/// A 48-bit MAC address.
pub type Mac = [u8; 6];

/// The forwarding state of one link.
#[derive(Clone, Debug)]
pub struct Switch {
    ports: usize,
    learning: bool,
    table: HashMap<Mac, usize>,
}

impl Switch {
    /// A link of `ports` ports; `learning` makes it a learning switch (a
    /// LAN), otherwise it must have exactly 2 ports.
    pub fn new(ports: usize, learning: bool) -> Switch {
        Switch {
            ports,
            learning,
            table: HashMap::new(),
        }
    }

    /// Whether this is a learning switch.
    pub fn is_lan(&self) -> bool {
        self.learning
    }

    /// The port where `mac` was last seen, if learned.
    pub fn lookup(&self, mac: &Mac) -> Option<usize> {
        self.table.get(mac).copied()
    }

    /// Number of learned addresses.
    pub fn learned(&self) -> usize {
        self.table.len()
    }

    /// Learns from a frame that entered on `in_port` and appends to `out`
    /// the ports it must go to. A frame shorter than an Ethernet header is
    /// flooded (point-to-point: passed on) unlearned.
    pub fn forward(&mut self, in_port: usize, frame: &[u8], out: &mut Vec<usize>) {
        if !self.learning {
            if self.ports == 2 && in_port < 2 {
                out.push(1 - in_port);
            }
            return;
        }
        let flood = |out: &mut Vec<usize>| out.extend((0..self.ports).filter(|&p| p != in_port));
        if frame.len() < 14 {
            flood(out);
            return;
        }
        let mut dst = [0u8; 6];
        let mut src = [0u8; 6];
        dst.copy_from_slice(&frame[0..6]);
        src.copy_from_slice(&frame[6..12]);
        if src[0] & 1 == 0 {
            if self.table.len() >= MAX_TABLE && !self.table.contains_key(&src) {
                self.table.clear();
            }
            self.table.insert(src, in_port);
        }
        if dst[0] & 1 != 0 {
            flood(out);
            return;
        }
        match self.table.get(&dst) {
            Some(&p) if p == in_port => {}
            Some(&p) => out.push(p),
            None => flood(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(dst: u8, src: u8) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, dst]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, src]);
        f
    }

    fn targets(sw: &mut Switch, port: usize, f: &[u8]) -> Vec<usize> {
        let mut out = Vec::new();
        sw.forward(port, f, &mut out);
        out
    }

    #[test]
    fn point_to_point_goes_to_the_other_port() {
        let mut sw = Switch::new(2, false);
        assert_eq!(targets(&mut sw, 0, &frame(9, 1)), vec![1]);
        assert_eq!(targets(&mut sw, 1, &[0u8; 3]), vec![0]);
        assert_eq!(sw.learned(), 0);
    }

    #[test]
    fn lan_floods_unknown_then_learns() {
        let mut sw = Switch::new(3, true);
        // A → B unknown: flooded to B and C.
        assert_eq!(targets(&mut sw, 0, &frame(0xB, 0xA)), vec![1, 2]);
        assert_eq!(sw.lookup(&[2, 0, 0, 0, 0, 0xA]), Some(0));
        // B → A: A is known, unicast.
        assert_eq!(targets(&mut sw, 1, &frame(0xA, 0xB)), vec![0]);
        // A → B now known.
        assert_eq!(targets(&mut sw, 0, &frame(0xB, 0xA)), vec![1]);
        // Broadcast and multicast are flooded.
        let mut b = frame(0, 0xC);
        b[0..6].copy_from_slice(&[0xff; 6]);
        assert_eq!(targets(&mut sw, 2, &b), vec![0, 1]);
        b[0..6].copy_from_slice(&[0x01, 0x00, 0x5e, 0, 0, 1]);
        assert_eq!(targets(&mut sw, 2, &b), vec![0, 1]);
        // Destination learned on the ingress port: dropped.
        assert_eq!(targets(&mut sw, 2, &frame(0xC, 0xD)), Vec::<usize>::new());
        // Station moves: relearned.
        assert_eq!(targets(&mut sw, 2, &frame(0xB, 0xA)), vec![1]);
        assert_eq!(sw.lookup(&[2, 0, 0, 0, 0, 0xA]), Some(2));
    }

    #[test]
    fn multicast_source_is_not_learned_and_table_is_bounded() {
        let mut sw = Switch::new(3, true);
        let mut f = frame(0xB, 0);
        f[6] = 0x01;
        targets(&mut sw, 0, &f);
        assert_eq!(sw.learned(), 0);
        for i in 0..(MAX_TABLE as u32 + 10) {
            let mut f = frame(0xB, 0);
            f[8..12].copy_from_slice(&i.to_be_bytes());
            targets(&mut sw, 1, &f);
        }
        assert!(sw.learned() <= MAX_TABLE);
    }

    #[test]
    fn two_port_lan_learns() {
        let mut sw = Switch::new(2, true);
        assert_eq!(targets(&mut sw, 0, &frame(0xB, 0xA)), vec![1]);
        assert_eq!(targets(&mut sw, 1, &frame(0xB, 0xA)), vec![0]);
    }
}
