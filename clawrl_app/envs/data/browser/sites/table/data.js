// The staff directory shared by the list and the detail page.
const STAFF = [
  { id: 1, name: "Amara Okafor", dept: "Sales", role: "Account executive", salary: 61000, city: "Lagos" },
  { id: 2, name: "Bruno Costa", dept: "Engineering", role: "Backend developer", salary: 78000, city: "Lisbon" },
  { id: 3, name: "Chen Wei", dept: "Engineering", role: "Data engineer", salary: 83000, city: "Shanghai" },
  { id: 4, name: "Dana Levi", dept: "Support", role: "Support lead", salary: 52000, city: "Haifa" },
  { id: 5, name: "Erik Lund", dept: "Finance", role: "Controller", salary: 74000, city: "Oslo" },
  { id: 6, name: "Fatima Zahra", dept: "Sales", role: "Sales manager", salary: 88000, city: "Casablanca" },
  { id: 7, name: "Gita Rao", dept: "Engineering", role: "Staff engineer", salary: 112000, city: "Pune" },
  { id: 8, name: "Hugo Martin", dept: "Support", role: "Support agent", salary: 41000, city: "Lyon" },
  { id: 9, name: "Ines Moreau", dept: "Finance", role: "Analyst", salary: 59000, city: "Brussels" },
  { id: 10, name: "Jonas Berg", dept: "Engineering", role: "Frontend developer", salary: 71000, city: "Stockholm" },
  { id: 11, name: "Kofi Mensah", dept: "Sales", role: "Sales associate", salary: 47000, city: "Accra" },
  { id: 12, name: "Lena Vogel", dept: "Support", role: "Support agent", salary: 43000, city: "Leipzig" },
];
